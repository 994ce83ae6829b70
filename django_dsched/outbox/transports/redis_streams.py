"""Redis Streams: ``XADD`` each message to a stream per topic (extra ``redis``).

Options: ``URL`` (default ``redis://localhost:6379/0``), ``STREAM`` (default
``dsched:{topic}``; ``{topic}``, ``{type}`` and ``{host}`` are filled in), ``MAXLEN``
(approximate trimming, default none), ``SOCKET_TIMEOUT`` (seconds, default 5). A route that
serves hosts besides the operator's needs a ``STREAM`` that is fixed or has ``{host}`` before
``{topic}`` and ``{type}`` (``dsched:{host}:{topic}``), so a topic cannot name another host's
stream (system check ``dsched.E051``).

Each entry has the fields ``id`` (the idempotency key), ``topic``, ``type`` and ``event``
(the CloudEvents envelope as JSON). A batch is pipelined: its commands written at once on
one connection, then each reply read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import (
    Problem,
    Transport,
    destination_problem,
    encode,
    render,
)

DEFAULT_URL = "redis://localhost:6379/0"
# A batch is written in pieces of about this many bytes, each within the socket timeout.
WRITE_BYTES = 65_536


class RedisStreamsTransport(Transport):
    alias = "redis"
    requires = ("redis", "redis-py", "redis")
    batch_size = 200
    options = frozenset({"URL", "STREAM", "MAXLEN", "SOCKET_TIMEOUT"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import hiredis
        import redis

        self.pack = hiredis.pack_command  # C: a batch's commands are most of a relay's work
        self.refused = redis.ResponseError
        timeout = float(options.get("SOCKET_TIMEOUT", 5.0))
        self.client = redis.Redis.from_url(
            options.get("URL", DEFAULT_URL),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry_on_timeout=False,
        )
        self.stream = options.get("STREAM", "dsched:{topic}")
        maxlen = options.get("MAXLEN")
        self.trim = () if maxlen is None else ("MAXLEN", "~", maxlen)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        problems += cls.missing_library()
        maxlen = options.get("MAXLEN")
        if maxlen is not None and not (
            isinstance(maxlen, int) and not isinstance(maxlen, bool) and maxlen > 0
        ):
            problems.append("MAXLEN must be a positive whole number or None")
        timeout = options.get("SOCKET_TIMEOUT", 5.0)
        if not (isinstance(timeout, int | float) and timeout > 0):
            problems.append("SOCKET_TIMEOUT must be a positive number of seconds")
        return problems

    @classmethod
    def missing_library(cls) -> list[str]:
        problems = super().missing_library()
        try:
            import_module("hiredis")
        except ImportError:
            problems.append("needs hiredis: pip install 'django-dsched[redis]'")
        try:
            release = tuple(int(part) for part in version("redis").split(".")[:2])
        except (PackageNotFoundError, ValueError):
            return problems  # not installed (said above), or a build of its own
        if release < (5, 3):
            problems.append("needs redis-py 5.3 or later: pip install 'django-dsched[redis]'")
        return problems

    @classmethod
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        return (
            destination_problem("STREAM", options.get("STREAM", "dsched:{topic}")) if shared else []
        )

    def command(self, message: Message) -> tuple[Any, ...]:
        """The message's ``XADD`` (what redis-py's ``xadd`` sends, built once: a relay sends
        thousands a second)."""
        return (
            "XADD",
            render(self.stream, message),
            *self.trim,
            "*",
            "id",
            str(message.id),
            "topic",
            message.topic,
            "type",
            message.event_type,
            "event",
            encode(message),
        )

    def send(self, message: Message) -> None:
        (error,) = self.send_many([message])
        if error is not None:
            raise error

    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        """The batch's commands written at once on one connection, then each reply: a message
        whose command cannot be made, or that Redis refuses, fails alone. If the connection
        fails, the messages answered are sent and the others fail with its error (the relay
        sends them again, with the same ids)."""
        outcomes: list[BaseException | None] = [None] * len(messages)
        sending: list[int] = []
        pieces: list[bytes] = []  # the commands in pieces of about WRITE_BYTES
        piece: list[bytes] = []
        size = 0
        for i, message in enumerate(messages):
            try:
                packed = self.pack(self.command(message))
            except Exception as exc:  # its stream's name or its event cannot be made
                outcomes[i] = exc
                continue
            sending.append(i)
            piece.append(packed)
            size += len(packed)
            if size >= WRITE_BYTES:
                pieces.append(b"".join(piece))
                piece, size = [], 0
        if piece:
            pieces.append(b"".join(piece))
        if not sending:
            return outcomes
        pool = self.client.connection_pool
        try:
            connection = pool.get_connection()
        except Exception as exc:  # no connection: none is sent
            for i in sending:
                outcomes[i] = exc
            return outcomes
        answered = 0
        try:
            # Each piece's write has the socket timeout to itself, as redis-py's own writes.
            connection.send_packed_command(pieces)  # type: ignore[no-untyped-call]
            for i in sending:
                try:
                    connection.read_response()
                except self.refused as exc:
                    outcomes[i] = exc
                answered += 1
        except Exception as exc:  # the connection failed: the rest are not known to be sent
            for i in sending[answered:]:
                outcomes[i] = exc
        finally:
            if answered < len(sending):  # never back in the pool with replies unread
                connection.disconnect()  # type: ignore[no-untyped-call]
            pool.release(connection)
        return outcomes

    def close(self) -> None:
        self.client.close()
