"""In-process handlers: Python callables registered in code for a topic or an event type.

.. code-block:: python

    from django_dsched.handlers import handler, host_of

    @handler(event_type="report.build")
    def build_report(event: dict) -> None:
        ...  # event is the CloudEvents envelope; event["id"] is the idempotency key

Only callables registered with :func:`handler` ever run: a message selects them by its topic
and event type, never by a name read from the database. Registrations happen when their
module is imported; relays import every installed app's ``dsched_handlers`` and
``dsched_schedules`` modules (where ``@periodic`` registers its function as the handler) and
the modules listed in ``DSCHED_HANDLER_MODULES`` (:func:`autodiscover`).

**Grants.** A handler serves the operator's host (``DSCHED_DEFAULT_HOST_ID``) unless
``hosts=`` grants others (a list of host ids, or ``"*"``): a message of another host that
selects it is a dead letter saying so, and none of its handlers runs. ``host_of(event)``
reads the message's host (tenant) from the envelope's ``source``, which the database writes
from the schedule's host, never from its data: a handler serving several hosts checks it.
``@periodic`` adds a check of its own: its function runs only for its declared schedule.
"""

from __future__ import annotations

import importlib
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.utils.module_loading import autodiscover_modules

from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError
from django_dsched.models.validators import identifier_validator
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import SOURCE_PREFIX, host_key
from django_dsched.outbox.transports.base import host_of as message_host
from django_dsched.outbox.transports.grants import Hosts, hosts_problem, operator_host, parse_hosts

Handler = Callable[[dict[str, Any]], Any]
# A registration's own check of a message: why it refuses it, or None.
Check = Callable[[Message], str | None]
F = TypeVar("F", bound=Handler)

# Names of the modules relays import from every installed app: handlers, and declared
# schedules (``@periodic`` registers the function it decorates as their handler).
MODULE_NAMES = ("dsched_handlers", "dsched_schedules")
# Most (topic, event type) answers the registry keeps (both are the schedules' to choose).
FOUND_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class Registration:
    """A handler and whom it serves: ``hosts`` (None: the operator's host, read when asked),
    and ``check``, a further test of each message (``@periodic``'s)."""

    func: Handler
    hosts: Hosts | None = None
    check: Check | None = None

    def refusal(self, message: Message, host: str) -> str | None:
        """Why this handler must not run for ``message`` of ``host``; None if it may (its own
        check first: it says the more particular why)."""
        why = self.check(message) if self.check is not None else None
        hosts = self.hosts
        if hosts is None:
            hosts = Hosts(False, frozenset({operator_host()}))
        if why is None and not hosts.serves(host):
            why = (
                f"an in-process handler of topic {message.topic!r} / event type "
                f"{message.event_type!r} does not serve host {host}: a handler serves the "
                "operator's host unless @handler(..., hosts=[...]) grants others"
            )
        return why


def grant_of(hosts: Any) -> Hosts | None:
    """``hosts=`` of a registration as a grant (None: the operator's host)."""
    if hosts is None:
        return None
    why = hosts_problem(hosts)
    if why is not None:
        raise ConfigurationError(why.replace("HOSTS", "hosts=", 1))
    return parse_hosts(hosts, "")


class HandlerRegistry:
    def __init__(self) -> None:
        self._by_topic: dict[str, list[Registration]] = {}
        self._by_type: dict[str, list[Registration]] = {}
        self._lock = threading.Lock()
        # registrations()' answers, by (topic, event type); emptied by every change.
        self._found: dict[tuple[str, str], list[Registration]] = {}

    def register(
        self,
        func: Handler,
        *,
        topic: str | None = None,
        event_type: str | None = None,
        hosts: Iterable[Any] | str | None = None,
        check: Check | None = None,
    ) -> None:
        """Run ``func`` for the messages of ``topic`` (or of ``event_type``) of the hosts
        ``hosts`` grants (None: the operator's), which ``check`` (if given) does not refuse.
        Registering a function again for the same key replaces its grant."""
        if (topic is None) == (event_type is None):
            raise ConfigurationError(
                "Register a handler for a topic or for an event type (one of them)."
            )
        if not callable(func):
            raise ConfigurationError(f"{func!r} is not callable.")
        key = topic if topic is not None else event_type
        assert key is not None
        identifier_validator(key)
        registration = Registration(func, grant_of(hosts), check)
        table = self._by_topic if topic is not None else self._by_type
        with self._lock:
            found = table.setdefault(key, [])
            found[:] = [r for r in found if r.func != func] + [registration]
            self._found = {}

    def unregister(
        self, func: Handler, *, topic: str | None = None, event_type: str | None = None
    ) -> None:
        with self._lock:
            self._found = {}
            for table, key in ((self._by_topic, topic), (self._by_type, event_type)):
                if key is not None and key in table:
                    table[key] = [r for r in table[key] if r.func != func]
                    if not table[key]:
                        del table[key]

    def registrations(self, topic: str, event_type: str) -> list[Registration]:
        """The registrations a message selects: its event type's, then its topic's. The list
        is shared by the calls that find the same ones: do not change it."""
        found = self._found.get((topic, event_type))
        if found is None:
            with self._lock:
                found = [*self._by_type.get(event_type, ()), *self._by_topic.get(topic, ())]
                if len(self._found) >= FOUND_KEPT:
                    self._found = {}
                self._found[topic, event_type] = found
        return found

    def for_message(self, topic: str, event_type: str) -> list[Handler]:
        """The handlers a message runs: its event type's, then its topic's (each once)."""
        return list(dict.fromkeys(r.func for r in self.registrations(topic, event_type)))

    def refusal(self, message: Message) -> str | None:
        """Why the handlers ``message`` selects must not run for it (the first that refuses:
        then none runs); None when every one serves its host."""
        host = message_host(message) or operator_host()
        for registration in self.registrations(message.topic, message.event_type):
            why = registration.refusal(message, host)
            if why is not None:
                return why
        return None

    def __len__(self) -> int:
        return sum(map(len, self._by_topic.values())) + sum(map(len, self._by_type.values()))


registry = HandlerRegistry()


def handler(
    *,
    topic: str | None = None,
    event_type: str | None = None,
    hosts: Iterable[Any] | str | None = None,
) -> Callable[[F], F]:
    """Decorator: run the function for every message of ``topic`` (or of ``event_type``) of
    the operator's host, or of the hosts ``hosts`` lists (``"*"``: every host)."""

    def decorate(func: F) -> F:
        registry.register(func, topic=topic, event_type=event_type, hosts=hosts)
        return func

    return decorate


def host_of(event: dict[str, Any]) -> uuid.UUID:
    """The host (tenant) of a delivered event: its ``source``, which the database composes
    from the schedule's host (the event's data is the schedule's, and may say anything)."""
    source = event.get("source") if isinstance(event, dict) else None
    if not (isinstance(source, str) and source.startswith(SOURCE_PREFIX)):
        raise ValueError(f"not an event of django-dsched: source {source!r}")
    return uuid.UUID(host_key(source[len(SOURCE_PREFIX) :]))


def autodiscover() -> None:
    """Import the modules that register handlers (settings and installed apps only)."""
    autodiscover_modules(*MODULE_NAMES)
    for name in app_settings.HANDLER_MODULES:
        importlib.import_module(name)
