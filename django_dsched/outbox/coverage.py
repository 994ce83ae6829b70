"""Which topics and event types of the schedules nobody would deliver: no transport routes
the topic for the schedules' host (none is granted to it), or it goes to in-process handlers
and none is registered for it, or those registered do not serve the host.

Read by the system check ``dsched.W003`` (``manage.py check --database``) and logged by
``run_relay`` at start, so a schedule whose every delivery would fail says so before it
fires, not after its messages are dead-lettered.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.enums import LIVE
from django_dsched.exceptions import ConfigurationError, PermanentDeliveryError
from django_dsched.outbox.handlers import HandlerRegistry, Registration, autodiscover, registry
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.in_process import HandlerTransport
from django_dsched.outbox.transports.registry import Transports, backend_class
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)

# The (host, topic, event type) triples of schedules that may still fire, at most this many
# (read by a scan of schedule_t: a check, not the fire path).
LIMIT = 1000
USED = """
SELECT DISTINCT host_id::text, event_topic, event_type FROM schedule_t
WHERE state = ANY(%s)
ORDER BY 2, 3, 1
LIMIT %s
"""


@dataclass(frozen=True, slots=True)
class Unserved:
    host_id: str
    topic: str
    event_type: str
    why: str

    def __str__(self) -> str:
        return f"topic {self.topic!r}, event type {self.event_type!r}: {self.why}"


def unserved(
    transports: Transports | None = None, handlers: HandlerRegistry | None = None
) -> list[Unserved]:
    """The topics and event types of schedules that may still fire and that no transport or
    handler would deliver (handler modules are imported first, as a relay does)."""
    transports = transports or Transports()
    if handlers is None:
        autodiscover()
        handlers = registry
    with connections[app_settings.DATABASE].cursor() as cursor:
        cursor.execute(USED, [list(LIVE), LIMIT])
        used = cursor.fetchall()
    found = []
    for host_id, topic, event_type in used:
        try:
            route = transports.route_for(topic, host_id)
        except (ConfigurationError, PermanentDeliveryError) as exc:
            found.append(Unserved(host_id, topic, event_type, str(exc)))
            continue
        backend = transports.entry(route).get("BACKEND", "")
        try:
            in_process = issubclass(backend_class(backend), HandlerTransport)
        except Exception:  # a bad BACKEND is dsched.E007's to report
            continue
        if not in_process:
            continue
        refused = _refused_by_handlers(handlers, host_id, topic, event_type)
        if refused is not None:
            found.append(Unserved(host_id, topic, event_type, refused))
        elif not handlers.for_message(topic, event_type):
            found.append(
                Unserved(
                    host_id,
                    topic,
                    event_type,
                    "it goes to in-process handlers and none is registered for it "
                    "(@handler or @periodic in an app's dsched_handlers or dsched_schedules "
                    "module, or DSCHED_HANDLER_MODULES)",
                )
            )
    return found


def _refused_by_handlers(
    handlers: HandlerRegistry, host_id: str, topic: str, event_type: str
) -> str | None:
    """Why the handlers of a topic and event type refuse the host's messages by their grant
    (a ``@periodic`` function's own check needs a message, so it is not asked here)."""
    probe = Message(uuid.uuid4(), topic, event_type, {}, 1, host_id=uuid.UUID(host_id))
    for registration in handlers.registrations(topic, event_type):
        why = Registration(registration.func, registration.hosts).refusal(probe, host_id)
        if why is not None:
            return why
    return None


def warn_unserved() -> None:
    """Log a warning for each topic and event type nobody would deliver (``run_relay`` at
    start). Quiet when the database cannot be read yet: the relay waits for it."""
    try:
        found = unserved()
    except DatabaseError:
        return
    for item in found:
        logger.warning(
            "schedules of host %s have %s; their messages will fail until it is served",
            item.host_id,
            item,
        )
