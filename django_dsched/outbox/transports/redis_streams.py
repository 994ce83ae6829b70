"""Redis Streams: ``XADD`` each message to a stream per topic (extra ``redis``).

Options: ``URL`` (default ``redis://localhost:6379/0``), ``STREAM`` (default
``dsched:{topic}``; ``{topic}`` and ``{type}`` are filled in), ``MAXLEN`` (approximate
trimming, default none), ``SOCKET_TIMEOUT`` (seconds, default 5).

Each entry has the fields ``id`` (the idempotency key), ``topic``, ``type`` and ``event``
(the CloudEvents envelope as JSON). Batches go in one round trip: the relay's chunk of
``XADD`` commands is written in the Redis protocol here, once (redis-py's pipeline encodes
every argument of every command in Python: 14 arguments a message, most of the relay's
time per message), sent on one pooled connection, and each reply read in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django_dsched.outbox.claims import Message
from django_dsched.outbox.transports.base import Transport, encode, render

DEFAULT_URL = "redis://localhost:6379/0"


def _bulk(value: bytes) -> bytes:
    """One argument of a command in the Redis protocol (a bulk string)."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


_FIELD_ID, _FIELD_TOPIC, _FIELD_TYPE, _FIELD_EVENT = (
    _bulk(b"id"),
    _bulk(b"topic"),
    _bulk(b"type"),
    _bulk(b"event"),
)


class RedisStreamsTransport(Transport):
    alias = "redis"
    batch_size = 200
    options = frozenset({"URL", "STREAM", "MAXLEN", "SOCKET_TIMEOUT"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import redis

        timeout = float(options.get("SOCKET_TIMEOUT", 5.0))
        self.client = redis.Redis.from_url(
            options.get("URL", DEFAULT_URL),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry_on_timeout=False,
        )
        self.stream = options.get("STREAM", "dsched:{topic}")
        self.maxlen = options.get("MAXLEN")
        self._heads: dict[str, tuple[int, bytes]] = {}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        try:
            import redis  # noqa: F401
        except ImportError:
            problems.append("needs redis-py: pip install 'django-dsched[redis]'")
        maxlen = options.get("MAXLEN")
        if maxlen is not None and not (isinstance(maxlen, int) and maxlen > 0):
            problems.append("MAXLEN must be a positive whole number or None")
        timeout = options.get("SOCKET_TIMEOUT", 5.0)
        if not (isinstance(timeout, int | float) and timeout > 0):
            problems.append("SOCKET_TIMEOUT must be a positive number of seconds")
        return problems

    @staticmethod
    def fields(message: Message) -> dict[str, str | bytes]:
        return {
            "id": str(message.id),
            "topic": message.topic,
            "type": message.event_type,
            "event": encode(message),
        }

    def send(self, message: Message) -> None:
        self.client.xadd(
            render(self.stream, message),
            self.fields(message),  # type: ignore[arg-type]
            maxlen=self.maxlen,
            approximate=True,
        )

    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        if len(messages) == 1:
            return super().send_many(messages)
        try:
            packed = b"".join(map(self._packed, messages))
        except Exception:  # a message that cannot be written: one by one, each its error
            return super().send_many(messages)
        return self._send_packed(packed, len(messages))

    def _head(self, stream: str) -> bytes:
        """What comes before a message's fields: the command, the stream, the trimming,
        the id to assign, for ``stream`` (kept per stream name)."""
        head = self._heads.get(stream)
        if head is None:
            args = [b"XADD", stream.encode()]
            if self.maxlen is not None:
                args += [b"MAXLEN", b"~", str(self.maxlen).encode()]
            args.append(b"*")
            head = self._heads[stream] = (len(args) + 8, b"".join(map(_bulk, args)))
        return b"*%d\r\n%s" % head

    def _packed(self, message: Message) -> bytes:
        """``XADD`` of one message, as :meth:`send` sends it, in the Redis protocol."""
        return b"".join(
            (
                self._head(render(self.stream, message)),
                _FIELD_ID,
                _bulk(str(message.id).encode()),
                _FIELD_TOPIC,
                _bulk(message.topic.encode()),
                _FIELD_TYPE,
                _bulk(message.event_type.encode()),
                _FIELD_EVENT,
                _bulk(encode(message)),
            )
        )

    def _send_packed(self, packed: bytes, count: int) -> list[BaseException | None]:
        """Send ``count`` commands written in ``packed`` on one connection of the client's
        pool; read each reply in order: None (added) or the error it was refused with. A
        connection that fails fails the commands whose replies were not read (nothing is
        known of them; they are sent again)."""
        from redis.exceptions import ResponseError

        pool = self.client.connection_pool
        connection = pool.get_connection()
        results: list[BaseException | None] = []
        try:
            connection.send_packed_command([packed])  # type: ignore[no-untyped-call]
            while len(results) < count:
                try:
                    connection.read_response()
                except ResponseError as exc:
                    results.append(exc)
                else:
                    results.append(None)
        except Exception as exc:  # the connection failed: the rest is not known to be sent
            connection.disconnect()  # type: ignore[no-untyped-call]
            results += [exc] * (count - len(results))
        finally:
            pool.release(connection)
        return results

    def close(self) -> None:
        self.client.close()
