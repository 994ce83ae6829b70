"""Redis Streams: ``XADD`` each message to a stream per topic (extra ``redis``).

Options: ``URL`` (default ``redis://localhost:6379/0``), ``STREAM`` (default
``dsched:{topic}``; ``{topic}``, ``{type}`` and ``{host}`` are filled in), ``MAXLEN``
(approximate trimming, default none), ``SOCKET_TIMEOUT`` (seconds, default 5). A route that
serves hosts besides the operator's needs a ``STREAM`` that is fixed or has ``{host}`` before
``{topic}`` and ``{type}`` (``dsched:{host}:{topic}``), so a topic cannot name another host's
stream (system check ``dsched.E051``).

Each entry has the fields ``id`` (the idempotency key), ``topic``, ``type`` and ``event``
(the CloudEvents envelope as JSON). Batches go in one pipeline round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


class RedisStreamsTransport(Transport):
    alias = "redis"
    requires = ("redis", "redis-py", "redis")
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
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        return (
            destination_problem("STREAM", options.get("STREAM", "dsched:{topic}")) if shared else []
        )

    def command(self, message: Message) -> tuple[Any, ...]:
        """The message's ``XADD`` (what redis-py's ``xadd`` sends, built once: a relay sends
        thousands a second)."""
        trim = () if self.maxlen is None else ("MAXLEN", "~", self.maxlen)
        return (
            "XADD",
            render(self.stream, message),
            *trim,
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
        self.client.execute_command(*self.command(message))  # type: ignore[no-untyped-call]

    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        if len(messages) == 1:
            return super().send_many(messages)
        pipe = self.client.pipeline(transaction=False)
        for message in messages:
            pipe.execute_command(*self.command(message))  # type: ignore[no-untyped-call]
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # the connection failed: nothing is known to be sent
            return [exc] * len(messages)
        return [reply if isinstance(reply, BaseException) else None for reply in replies]

    def close(self) -> None:
        self.client.close()
