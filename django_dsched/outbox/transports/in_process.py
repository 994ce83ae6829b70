"""In-process handlers: run the callables registered with
:func:`django_dsched.handlers.handler`.

Each message runs the handlers registered for its event type and for its topic, in the
relay's thread, one after the other. The attempt fails if any handler raises (the whole set
runs again on retry: handlers must be idempotent, keyed on ``event["id"]``). A message of a
host one of them does not serve (:mod:`django_dsched.outbox.handlers`, grants), or that a
``@periodic`` function's check refuses, runs none: it is dead-lettered at once, saying why.

Option ``ATOMIC`` (default False): run each handler inside ``transaction.atomic()`` on the
dsched database, so a handler that raises leaves none of its writes there behind. Off by
default because it costs two round trips per message; handlers can open their own.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_dsched.conf import app_settings
from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.outbox.handlers import HandlerRegistry, registry
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import Transport


class HandlerTransport(Transport):
    alias = "handlers"
    batch_size = 1
    options = frozenset({"ATOMIC"})

    def __init__(self, *, registry_: HandlerRegistry | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.registry = registry_ or registry
        self.atomic = bool(options.get("ATOMIC", False))

    def send(self, message: Message) -> None:
        handlers = self.registry.for_message(message.topic, message.event_type)
        if not handlers:
            raise DeliveryError(
                f"no handler is registered for topic {message.topic!r} "
                f"or event type {message.event_type!r}"
            )
        refused = self.registry.refusal(message)
        if refused is not None:
            raise PermanentDeliveryError(refused)
        for func in handlers:
            if self.atomic:
                with transaction.atomic(using=app_settings.DATABASE):
                    func(message.payload)
            else:
                func(message.payload)
