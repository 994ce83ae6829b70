"""Audit events: every change to a schedule is an event on its own version sequence.

A change bumps the schedule's ``aggregate_version`` and writes an event with that version
to ``event_store_t`` in the same transaction, so a schedule's history (changes and fires)
is one ordered list: ``Event.objects.filter(aggregate_id=...).order_by("aggregate_version")``.
Audit events have no ``scheduled_ts`` and no outbox message.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connections

from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleOrigin
from django_dsched.history.event_ids import change_id, change_sql
from django_dsched.models import Event, Schedule
from django_dsched.models.schedule import BOUND_FIELDS, GRID_FIELDS

PREFIX = "dsched.schedule."


def plain(value: Any) -> Any:
    """A JSON-safe copy of a field value."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, list | tuple):  # a schedule's calendars
        return [plain(item) for item in value]
    return value


def actor_name(actor: Any) -> str:
    """ "alice" for a user, the string itself for a name, "system" for nothing."""
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    username = getattr(actor, "get_username", None)
    return username() if callable(username) else str(actor)


# What a schedule is (not its runtime state), as recorded in a "created" event: its name,
# the fields that place its slots and bound them, its misfire policy, what it sends.
DEFINITION_FIELDS = (
    "schedule_name",
    *GRID_FIELDS,
    *BOUND_FIELDS,
    "misfire_policy",
    "misfire_grace_seconds",
    "catch_up_limit",
    "priority",
    "event_topic",
    "event_type",
    "event_data",
    "origin",
    "idempotency_key",
    # The overlap and failure policies (models/overlap.py).
    "overlap_policy",
    "pause_on_failure",
)


def definition(schedule: Schedule) -> dict[str, Any]:
    """What a schedule is (not its runtime state), as recorded in a "created" event."""
    return {name: plain(getattr(schedule, name)) for name in DEFINITION_FIELDS}


def definition_sql(alias: str, names: Sequence[str] = DEFINITION_FIELDS) -> str:
    """:func:`definition` in SQL, of the row ``alias`` (a ``jsonb`` object; the fields'
    columns have their names); only ``names`` (of :data:`DEFINITION_FIELDS`) if given."""
    pairs = ", ".join(f"'{name}', {alias}.{name}" for name in names)
    return f"jsonb_build_object({pairs})"


def created_sql(definition: str, indent: str) -> str:
    """The "created" events of the schedules a data-modifying CTE ``c`` inserted, in SQL:
    the ``INSERT`` that writes them, for the CTE after ``c`` (a single create's statement
    and a bulk create's), each line indented by ``indent``. ``definition``: the schedule's
    :func:`definition`, a ``jsonb`` expression over ``c`` (:func:`definition_sql`).
    Parameters: ``event_type_`` and ``actor_``. Each event's id has the row's
    ``created_ts`` in its top bits (``event_ids.change_sql``): it is stored in that day's
    partition."""
    events = connections[app_settings.DATABASE].ops.quote_name(Event._meta.db_table)
    return textwrap.indent(
        f"""INSERT INTO {events} (id, host_id, aggregate_id, aggregate_type,
    aggregate_version, event_type, event_ts, payload, metadata)
SELECT {change_sql("c.created_ts")}, c.host_id, c.schedule_id, 'Schedule',
    c.aggregate_version, %(event_type_)s, c.created_ts,
    jsonb_build_object('actor', %(actor_)s::text, 'at', c.created_ts,
                       'definition', {definition}),
    jsonb_build_object('actor', %(actor_)s::text, 'schedule_name', c.schedule_name,
                       'origin', c.origin)
FROM c""",
        indent,
    )


def event_for(
    schedule: Schedule,
    verb: str,
    *,
    actor: Any,
    at: datetime,
    changes: dict[str, Any] | None = None,
    **details: Any,
) -> Event:
    """An unsaved audit event for the change that brought ``schedule`` to its version."""
    who = actor_name(actor)
    payload: dict[str, Any] = {"actor": who, "at": at.isoformat(), **details}
    if changes is not None:
        payload["changes"] = changes
    return Event(
        # The change's time (``at``, from the database) in the id: the day it is stored in.
        id=change_id(at),
        host_id=schedule.host_id,
        aggregate_id=schedule.schedule_id,
        aggregate_type="Schedule",
        aggregate_version=schedule.aggregate_version,
        event_type=PREFIX + verb,
        event_ts=at,
        payload=payload,
        metadata={
            "actor": who,
            "schedule_name": schedule.schedule_name,
            "origin": schedule.origin or ScheduleOrigin.ADMIN,
        },
    )
