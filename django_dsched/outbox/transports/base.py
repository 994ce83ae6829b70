"""What every transport is: a small class that sends one claimed message somewhere."""

from __future__ import annotations

import functools
import json
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any, ClassVar, Generic, TypeVar

from django_dsched.exceptions import PermanentDeliveryError
from django_dsched.outbox.messages import Message

# The fire path writes the host into the CloudEvent's source: '/django-dsched/<host_id>'.
SOURCE_PREFIX = "/django-dsched/"

# A check's id and what it found (Transport.tenancy_problems).
Problem = tuple[str, str]

T = TypeVar("T")


class Transport:
    """Base class. Subclasses implement :meth:`send` and may override :meth:`send_many`.

    A transport is built once per relay and route from its ``OPTIONS`` (keyword arguments,
    upper-case names as in settings). A relay sends to one route for one host by up to
    ``concurrency`` sends at once (the route's ``CONCURRENCY``), so :meth:`send_many` may be
    called from several threads at once, and must be safe so (a connection per thread where
    the client library's is not). :meth:`send` returns when the message is accepted by the
    destination and raises otherwise; any exception is a failed attempt,
    :class:`PermanentDeliveryError` one that is not worth retrying.
    """

    # Alias usable as BACKEND in DSCHED_TRANSPORTS.
    alias: ClassVar[str] = ""
    # Messages handed to one send_many() call. The relay renews its claims between calls, so
    # one call must finish well within the visibility timeout.
    batch_size: ClassVar[int] = 1
    # Sends at once to one route for one host, unless the route's CONCURRENCY says otherwise.
    concurrency: ClassVar[int] = 1
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
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        """What is wrong with ``options`` for the hosts the route serves (system checks
        dsched.E051, E052): ``shared`` when it serves a host besides the operator's
        (``DSCHED_DEFAULT_HOST_ID``), whose schedules must not choose a destination of another
        host's. Empty when they are fine; called only once :meth:`check_options` found none."""
        return []

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


class PerThread(Generic[T]):
    """A client of each sending thread, for libraries whose connections must not be shared
    across threads (pika, kombu): ``get`` the calling thread's, ``set`` it, ``drop`` it
    (closed), ``close_all`` when the relay stops."""

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: dict[int, T] = {}

    def get(self) -> T | None:
        return getattr(self._local, "value", None)

    def set(self, value: T) -> None:
        self.drop()
        self._local.value = value
        with self._lock:
            self._all[threading.get_ident()] = value

    def drop(self) -> None:
        """Close the calling thread's client, if any."""
        value = self.get()
        if value is None:
            return
        self._local.value = None
        with self._lock:
            self._all.pop(threading.get_ident(), None)
        self._quietly(value)

    def close_all(self) -> None:
        with self._lock:
            values, self._all = list(self._all.values()), {}
        self._local = threading.local()
        for value in values:
            self._quietly(value)

    def _quietly(self, value: T) -> None:
        try:
            self._close(value)
        except Exception:  # already broken: nothing more to release
            pass


def encode(message: Message) -> bytes:
    """The message's CloudEvents envelope as UTF-8 JSON (what goes on the wire): the text the
    claim read, as the database composes it (what the admin and REST show); compact JSON
    for a message made in Python."""
    if message.text is not None:
        return message.text.encode()
    return json.dumps(message.payload, separators=(",", ":"), ensure_ascii=False).encode()


def host_key(host: Any) -> str:
    """A host id as route tables and grants key it (canonical UUID text); ``ValueError`` if
    not one."""
    return str(host if isinstance(host, uuid.UUID) else uuid.UUID(str(host)))


def host_of(message: Message) -> str | None:
    """The host (tenant) id of a message: the claim's, else the envelope's ``source`` (which
    the database composes from the event's host, never from its data); None if unknown."""
    host = getattr(message, "host_id", None)
    if host is None:
        source = message.payload.get("source") if isinstance(message.payload, dict) else None
        if not (isinstance(source, str) and source.startswith(SOURCE_PREFIX)):
            return None
        host = source[len(SOURCE_PREFIX) :]
    try:
        return host_key(host)
    except ValueError:
        return None


# The placeholders of a destination name, and those a schedule chooses the value of.
PLACEHOLDER = re.compile(r"\{(topic|type|host)\}")
CHOSEN = ("{topic}", "{type}", "{event_type}")


def render(template: str, message: Message, quote: Any = None, *, cache: bool = True) -> str:
    """Fill ``{host}``, ``{topic}`` and ``{type}`` in a destination name (stream, routing key,
    queue); ``quote`` (a function of text) encodes each value first. A message without a
    host cannot fill ``{host}``: a permanent failure.

    A batch's messages mostly share their names: a message that carries its host (every
    claimed one) is filled from a cache keyed by what fills it (``cache=False`` for a
    template made per message, which would only churn it)."""
    if "{" not in template:
        return template
    host_id = getattr(message, "host_id", None)
    if cache and quote is None and host_id is not None:
        return _rendered(template, message.topic, message.event_type, host_id)
    return _fill(template, message.topic, message.event_type, lambda: host_of(message), quote)


@functools.lru_cache(maxsize=4096)
def _rendered(template: str, topic: str, event_type: str, host: Any) -> str:
    try:
        text: str | None = host_key(host)
    except ValueError:
        text = None
    return _fill(template, topic, event_type, lambda: text, None)


def _fill(
    template: str, topic: str, event_type: str, host: Callable[[], str | None], quote: Any
) -> str:
    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name == "host":
            text = host()
            if text is None:
                raise PermanentDeliveryError("the message names no host to fill {host} with")
        else:
            text = topic if name == "topic" else event_type
        return text if quote is None else str(quote(text))

    return PLACEHOLDER.sub(value, template)


def chosen_by_schedule(template: str) -> bool:
    """Whether a schedule's topic or event type chooses this destination beyond its host's:
    a ``{topic}`` or ``{type}`` that no ``{host}`` comes before. ``"dsched:{host}:{topic}"``
    keeps each host's names apart (every name a host can make starts with its own id);
    ``"dsched:{topic}"`` lets any host name any stream."""
    host = template.find("{host}")
    chosen = [at for at in (template.find(p) for p in CHOSEN) if at >= 0]
    return bool(chosen) and (host < 0 or host > min(chosen))


def destination_problem(name: str, template: Any) -> list[Problem]:
    """dsched.E051 for a destination option a shared route's schedules would choose."""
    if isinstance(template, str) and chosen_by_schedule(template):
        return [
            (
                "dsched.E051",
                f"{name} {template!r} lets a schedule's topic or event type choose the "
                "destination, and the route serves hosts besides the operator's: put {host} "
                "before {topic} and {type} (so each host reaches only its own), or use a fixed "
                "name",
            )
        ]
    return []
