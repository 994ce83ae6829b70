"""In-process handlers: Python callables registered in code for a topic or an event type.

.. code-block:: python

    from django_dsched.outbox.handlers import handler

    @handler(event_type="report.build")
    def build_report(event: dict) -> None:
        ...  # event is the CloudEvents envelope; event["id"] is the idempotency key

Only callables registered with :func:`handler` ever run: a message selects them by its topic
and event type, never by a name read from the database. Registrations happen when their
module is imported; relays import every installed app's ``dsched_handlers`` and
``dsched_schedules`` modules (where ``@periodic`` registers its function as the handler) and
the modules listed in ``DSCHED_HANDLER_MODULES`` (:func:`autodiscover`).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.utils.module_loading import autodiscover_modules

from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError
from django_dsched.models.validators import identifier_validator

Handler = Callable[[dict[str, Any]], Any]
F = TypeVar("F", bound=Handler)

# Names of the modules relays import from every installed app: handlers, and declared
# schedules (``@periodic`` registers the function it decorates as their handler).
MODULE_NAMES = ("dsched_handlers", "dsched_schedules")


class HandlerRegistry:
    def __init__(self) -> None:
        self._by_topic: dict[str, list[Handler]] = {}
        self._by_type: dict[str, list[Handler]] = {}
        self._lock = threading.Lock()
        # for_message()'s answers, by (topic, event type); emptied by every change.
        self._found: dict[tuple[str, str], list[Handler]] = {}

    def register(
        self, func: Handler, *, topic: str | None = None, event_type: str | None = None
    ) -> None:
        if (topic is None) == (event_type is None):
            raise ConfigurationError(
                "Register a handler for a topic or for an event type (one of them)."
            )
        if not callable(func):
            raise ConfigurationError(f"{func!r} is not callable.")
        key = topic if topic is not None else event_type
        assert key is not None
        identifier_validator(key)
        table = self._by_topic if topic is not None else self._by_type
        with self._lock:
            funcs = table.setdefault(key, [])
            if func not in funcs:
                funcs.append(func)
            self._found = {}

    def unregister(
        self, func: Handler, *, topic: str | None = None, event_type: str | None = None
    ) -> None:
        with self._lock:
            self._found = {}
            for table, key in ((self._by_topic, topic), (self._by_type, event_type)):
                if key is not None and func in table.get(key, []):
                    table[key].remove(func)
                    if not table[key]:
                        del table[key]

    def for_message(self, topic: str, event_type: str) -> list[Handler]:
        """The handlers a message runs: its event type's, then its topic's (each once). The
        list is shared by the calls that find the same handlers: do not change it."""
        found = self._found.get((topic, event_type))
        if found is None:
            with self._lock:
                found = list(
                    dict.fromkeys(
                        [*self._by_type.get(event_type, ()), *self._by_topic.get(topic, ())]
                    )
                )
                self._found[topic, event_type] = found
        return found

    def __len__(self) -> int:
        return sum(map(len, self._by_topic.values())) + sum(map(len, self._by_type.values()))


registry = HandlerRegistry()


def handler(*, topic: str | None = None, event_type: str | None = None) -> Callable[[F], F]:
    """Decorator: run the function for every message of ``topic`` (or of ``event_type``)."""

    def decorate(func: F) -> F:
        registry.register(func, topic=topic, event_type=event_type)
        return func

    return decorate


def autodiscover() -> None:
    """Import the modules that register handlers (settings and installed apps only)."""
    autodiscover_modules(*MODULE_NAMES)
    for name in app_settings.HANDLER_MODULES:
        importlib.import_module(name)
