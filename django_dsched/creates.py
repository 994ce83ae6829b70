"""Creating schedules in one statement each: validation in Python, then one ``INSERT`` that
writes the schedules and their "created" audit events together.

The statement (:func:`insert`; many schedules at once: :mod:`bulk_insert`) inserts the
audit event from the row it inserted (a data-modifying CTE): a crash leaves both or
neither. It skips rows that conflict with a unique constraint
(``ON CONFLICT DO NOTHING``): a row with an idempotency key that exists is then the
existing schedule (read back in a second statement, which under READ COMMITTED sees a
winner that committed while this statement waited for it), and any other skipped row
took a name in use, the same error ``full_clean()`` gives. A single create (:func:`create`,
:func:`create_instance`) sends the shorter statement of :mod:`django_dsched.single_insert`
instead (only the columns that differ from their database defaults).

A one-shot created with ``delay=`` gets its time from the statement itself
(``statement_timestamp() + delay``): no round trip to read the database's clock first.
Other kinds without a start read the clock once per call (:class:`Clock`).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections
from django.db.models import Field
from django.utils.translation import gettext as _

from django_dsched import audit, bulk_insert
from django_dsched.clock import database_now
from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.models import Event, Schedule
from django_dsched.schedule_checks import (
    FieldCache,
    constraint_error,
    unique_name_error,
    validate_new,
)
from django_dsched.single_insert import insert_one
from django_dsched.specs import Builder, Cron, Interval, Once, Spec, database_defaults

# The longest delay= of a one-shot (its time is computed by the database, so the bound is
# checked here: it keeps the time far inside the supported range).
MAX_DELAY = timedelta(days=36_525)
# Columns computed in SQL for a one-shot given by delay=.
TIMED = ("start_ts", "next_run_ts", "next_slot_ts")


class Clock:
    """The database's now, read at most once per call, when some schedule needs it."""

    def __init__(self) -> None:
        self._now: datetime | None = None

    def now(self) -> datetime:
        if self._now is None:
            self._now = database_now()
        return self._now


@dataclass(slots=True)
class Prepared:
    """A validated, placed, unsaved schedule; ``delay`` set when SQL computes its time."""

    schedule: Schedule
    delay: timedelta | None
    created: bool = True


class Preparer:
    """Turns specs into validated schedules, as ``full_clean()`` and ``save()`` would."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.cache = FieldCache.shared()
        self.builder = Builder.shared()

    def prepare(self, spec: Spec) -> Prepared:
        if not isinstance(spec, Once | Interval | Cron):
            raise ValidationError(
                _("Give an api.Once, api.Interval or api.Cron, not %(type)s.")
                % {"type": type(spec).__name__},
                code="not_a_spec",
            )
        schedule = self.builder.build(spec)
        delay = None
        if isinstance(spec, Once):
            delay = self._once_time(schedule, spec)
        elif spec.start is None:
            schedule.start_ts = self.clock.now()
        validate_new(schedule, self.cache)
        # What Schedule.save() does before an insert.
        schedule.active = schedule.state == ScheduleState.ACTIVE
        if schedule.schedule_kind != ScheduleKind.INTERVAL:
            schedule.frequency_unit, schedule.frequency_time = "", None
        if delay is None:
            schedule.place(schedule.start_ts)
        return Prepared(schedule, delay)

    def prepare_instance(self, schedule: Schedule) -> Prepared:
        """An unsaved ``Schedule`` built by a caller (admin, REST, declared schedules): no
        start means now, as ``Schedule.save()`` has it."""
        values = schedule.__dict__  # start_ts and next_run_ts are unset until saved
        if values.get("start_ts") is None:
            schedule.start_ts = self.clock.now()
        validate_new(schedule, self.cache)
        schedule.active = schedule.state == ScheduleState.ACTIVE
        if schedule.schedule_kind != ScheduleKind.INTERVAL:
            schedule.frequency_unit, schedule.frequency_time = "", None
        if values.get("next_run_ts") is None:
            schedule.place(schedule.start_ts)
        return Prepared(schedule, None)

    def _once_time(self, schedule: Schedule, spec: Once) -> timedelta | None:
        if (spec.at is None) == (spec.delay is None):
            raise ValidationError(_("Give either at= or delay=."), code="at_or_delay")
        delay = spec.delay
        if delay is None:
            return None
        if not isinstance(delay, timedelta):
            raise ValidationError(
                {"start_ts": _("Give the delay as a timedelta.")}, code="invalid_delay"
            )
        if delay < timedelta(0):
            raise ValidationError(_("The delay must not be negative."), code="negative_delay")
        if delay > MAX_DELAY:
            raise ValidationError(_("The delay must be at most 100 years."), code="delay_too_long")
        if schedule.jitter_seconds or schedule.end_ts is not None:
            # Jitter and an end need the time in Python: read the clock (once per call).
            schedule.start_ts = self.clock.now() + delay
            return None
        return delay


_column_lists: dict[tuple[str, ...], list[Field[Any, Any]]] = {}


def _columns(skipped: tuple[str, ...]) -> list[Field[Any, Any]]:
    """The columns an insert names: all but ``skipped`` (those the database fills)."""
    if skipped not in _column_lists:
        _column_lists[skipped] = [
            field for field in Schedule._meta.concrete_fields if str(field.column) not in skipped
        ]
    return _column_lists[skipped]


_statements: dict[tuple[Any, ...], str] = {}
_plans: dict[tuple[str, ...], list[tuple[Field[Any, Any], str, bool]]] = {}


def _statement(columns: list[Field[Any, Any]], returned: list[str]) -> str:
    key = (id(columns), tuple(returned), app_settings.DATABASE)
    if key not in _statements:
        _statements[key] = _build_statement(columns, returned)
    return _statements[key]


def _build_statement(columns: list[Field[Any, Any]], returned: list[str]) -> str:
    """The INSERT of one schedule (``VALUES``: cheaper to plan than ``unnest``) and its
    "created" event, with named parameters. Many schedules: ``bulk_insert``."""
    connection = connections[app_settings.DATABASE]
    quote = connection.ops.quote_name
    names = ", ".join(quote(str(field.column)) for field in columns)
    back = ", ".join(f"c.{quote(column)}" for column in returned)

    def scalar(name: str, db_type: str) -> str:
        return f"%({name})s::{db_type}"

    inputs = {
        str(field.column): scalar(str(field.column), field.db_type(connection) or "")
        for field in columns
    }
    inputs["delay_"] = scalar("delay_", "interval")
    inputs["event_id_"] = scalar("event_id_", "uuid")
    values = ", ".join(
        f"coalesce({inputs[str(field.column)]}, statement_timestamp() + {inputs['delay_']})"
        if field.attname in TIMED
        else inputs[str(field.column)]
        for field in columns
    )
    definition = audit.definition_sql("c")
    return f"""
        WITH c AS (
            INSERT INTO {quote(Schedule._meta.db_table)} ({names})
            VALUES ({values})
            ON CONFLICT DO NOTHING
            RETURNING *
        ), audit AS (
            INSERT INTO {quote(Event._meta.db_table)} (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, payload, metadata)
            SELECT {inputs["event_id_"]}, c.host_id, c.schedule_id, 'Schedule',
                c.aggregate_version, %(event_type_)s, c.created_ts,
                jsonb_build_object('actor', %(actor_)s::text, 'at', c.created_ts,
                                   'definition', {definition}),
                jsonb_build_object('actor', %(actor_)s::text, 'schedule_name', c.schedule_name,
                                   'origin', c.origin)
            FROM c
        )
        SELECT 1, {back} FROM c
    """


def _value(field: Field[Any, Any], value: Any) -> Any:
    if field.get_internal_type() == "JSONField" and value is not None:
        return json.dumps(value, cls=getattr(field, "encoder", None))
    return value


def insert(items: Sequence[Prepared], *, actor: Any) -> None:
    """Insert ``items`` with their "created" events (more than one: ``bulk_insert``).

    Each inserted item gets the values the database computed; one skipped by a unique
    conflict gets ``created = False`` and is left as it was.
    """
    if not items:
        return
    if len(items) > 1:
        bulk_insert.insert_many(items, actor=actor)
        return
    (item,) = items
    connection = connections[app_settings.DATABASE]
    filled = tuple(database_defaults(item.schedule))
    columns = _columns(filled)
    # Read back: the time (of a delay=) and what the database filled in. ``updated_ts``
    # is ``created_ts`` (both now()); ``next_run_ts`` and ``next_slot_ts`` of a delay= are
    # its start (no jitter: see Preparer._once_time).
    returned = ["start_ts", *(c for c in filled if c != "updated_ts")]
    by_column = {str(field.column): field for field in Schedule._meta.concrete_fields}
    # (attribute, from_db_value or None) of each column read back.
    readers = [
        (by_column[column].attname, getattr(by_column[column], "from_db_value", None))
        for column in returned
    ]
    # (field, column, whether its value is sent as JSON text) of each column inserted.
    plan = _plans.get(filled)
    if plan is None:
        plan = _plans[filled] = [
            (field, str(field.column), field.get_internal_type() == "JSONField")
            for field in columns
        ]
    assert Event._meta.pk is not None
    values = item.schedule.__dict__
    params: dict[str, Any] = {
        "event_type_": audit.PREFIX + "created",
        "actor_": audit.actor_name(actor),
        "delay_": item.delay,
        "event_id_": Event._meta.pk.get_default(),
    }
    params.update(
        {
            column: _value(field, values[field.attname]) if json else values[field.attname]
            for field, column, json in plan
        }
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(_statement(columns, returned), params)
            rows = cursor.fetchall()
    except IntegrityError as exc:
        raise constraint_error(exc, item.schedule) from exc
    if not rows:
        item.created = False
        return
    for (attname, converter), value in zip(readers, rows[0][1:], strict=True):
        values[attname] = converter(value, None, connection) if converter else value
    values["updated_ts"] = values["created_ts"]
    if item.delay is not None:
        values["next_run_ts"] = values["next_slot_ts"] = values["start_ts"]
    state = values["_state"]
    state.adding = False
    state.db = connection.alias


def existing_by_key(items: Sequence[Prepared]) -> dict[tuple[uuid.UUID, str], Schedule]:
    """The stored schedules with the keys of ``items`` (one query per host)."""
    keys: dict[uuid.UUID, set[str]] = defaultdict(set)
    for item in items:
        if item.schedule.idempotency_key is not None:
            keys[item.schedule.host_id].add(item.schedule.idempotency_key)
    found: dict[tuple[uuid.UUID, str], Schedule] = {}
    for host_id, host_keys in keys.items():
        for schedule in Schedule.objects.filter(host_id=host_id, idempotency_key__in=host_keys):
            assert schedule.idempotency_key is not None
            found[(host_id, schedule.idempotency_key)] = schedule
    return found


def create(spec: Spec, *, actor: Any = None) -> Schedule:
    """Create the schedule ``spec`` describes, or return the one with its key.

    One statement (two when the kind needs the database's clock first; one more when the
    key exists): no transaction of its own, so it adds no BEGIN/COMMIT round trips and
    leaves a caller's transaction usable after a validation error.
    """
    return _create(Preparer().prepare(spec), actor=actor)[0]


def create_instance(schedule: Schedule, *, actor: Any = None) -> tuple[Schedule, bool]:
    """Insert the unsaved ``schedule`` (validated first) with its "created" event; or, if
    its idempotency key exists, return the existing schedule. ``(schedule, created)``."""
    return _create(Preparer().prepare_instance(schedule), actor=actor)


def _create(item: Prepared, *, actor: Any) -> tuple[Schedule, bool]:
    if insert_one(item.schedule, item.delay, actor=actor):
        return item.schedule, True
    key = item.schedule.idempotency_key
    if key is not None:
        existing = existing_by_key([item]).get((item.schedule.host_id, key))
        if existing is not None:
            return existing, False
    raise unique_name_error(item.schedule)


__all__ = [
    "MAX_DELAY",
    "Clock",
    "Prepared",
    "Preparer",
    "create",
    "create_instance",
    "existing_by_key",
    "insert",
]
