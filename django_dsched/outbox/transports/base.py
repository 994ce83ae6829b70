"""What every transport is: a small class that sends one claimed message somewhere."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any, ClassVar

from django_dsched.outbox.claims import Message


class Transport:
    """Base class. Subclasses implement :meth:`send` and may override :meth:`send_many`.

    A transport is built once per relay from its ``OPTIONS`` (keyword arguments, upper-case
    names as in settings) and used from one thread. :meth:`send` returns when the message is
    accepted by the destination and raises otherwise; any exception is a failed attempt,
    :class:`PermanentDeliveryError` one that is not worth retrying.
    """

    # Alias usable as BACKEND in DSCHED_TRANSPORTS.
    alias: ClassVar[str] = ""
    # Messages handed to one send_many() call. The relay renews its claims between calls, so
    # one call must finish well within the visibility timeout.
    batch_size: ClassVar[int] = 1
    # True when a send hands the work to workers elsewhere (a task queue): the message is
    # delivered once they have it, and they report the run's phases themselves
    # (django_dsched.outbox.phases). False: the send is the run; the relay records its phases.
    hands_off: ClassVar[bool] = False
    # Option names this transport accepts (upper case, as written in settings).
    options: ClassVar[frozenset[str]] = frozenset()
    # The library it needs, if any: (module, its name in words, the extra that installs it).
    requires: ClassVar[tuple[str, str, str] | None] = None

    def __init__(self, **options: Any) -> None:
        self.settings = options

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Problems with ``options`` (for the system check); empty when they are fine."""
        unknown = sorted(set(options) - cls.options)
        if unknown:
            allowed = ", ".join(sorted(cls.options)) or "none"
            return [f"unknown option(s) {', '.join(unknown)} (allowed: {allowed})"]
        return []

    @classmethod
    def missing_library(cls) -> list[str]:
        """What to install, when the library this transport needs (``requires``) is missing."""
        if cls.requires is None:
            return []
        module, name, extra = cls.requires
        try:
            import_module(module)
        except ImportError:
            return [f"needs {name}: pip install 'django-dsched[{extra}]'"]
        return []

    def send(self, message: Message) -> None:
        raise NotImplementedError

    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        """Send each message; return, in order, None (sent) or the exception it failed with."""
        results: list[BaseException | None] = []
        for message in messages:
            try:
                self.send(message)
            except Exception as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    def close(self) -> None:
        """Release connections; the relay calls it when it stops."""


def encode(message: Message) -> bytes:
    """The message's CloudEvents envelope as UTF-8 JSON (what goes on the wire): the text the
    claim read, as the database composes it (what the admin and REST show); compact JSON
    for a message made in Python."""
    if message.text is not None:
        return message.text.encode()
    return json.dumps(message.payload, separators=(",", ":"), ensure_ascii=False).encode()


def render(template: str, message: Message) -> str:
    """Fill ``{topic}`` and ``{type}`` in a destination name (stream, routing key, URL)."""
    return template.replace("{topic}", message.topic).replace("{type}", message.event_type)
