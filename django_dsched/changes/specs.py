"""What to create: one small frozen dataclass per kind of schedule.

``api.create_once(...)`` and friends build one of these from their keywords;
``api.bulk_create([...])`` takes a list of them, of any mix of kinds. Each field means
what the keyword of the same name means on ``api.create_*`` (README, "The Python API").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core import exceptions as django_exceptions
from django.core.exceptions import NON_FIELD_ERRORS
from django.db.models.base import ModelState
from django.db.models.expressions import DatabaseDefault
from django.utils.translation import gettext as _

from django_dsched.enums import FrequencyUnit, ScheduleKind, ScheduleOrigin
from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule
from django_dsched.models.schedule import resolve_host


@dataclass(frozen=True, kw_only=True, slots=True)
class _Spec:
    topic: str
    event_type: str
    data: Any = None
    # Default: the key when there is one, else the schedule's id.
    name: str | None = None
    key: str | None = None
    host_id: uuid.UUID | str | None = None
    end: datetime | None = None
    max_fires: int | None = None
    misfire_policy: str | None = None
    misfire_grace_seconds: int | None = None
    catch_up_limit: int | None = None
    jitter_seconds: int | None = None
    priority: int | None = None

    kind = ""

    def fields(self) -> dict[str, Any]:
        """The kind's own ``Schedule`` fields."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True, slots=True)
class Once(_Spec):
    """Fire once, at ``at`` or after ``delay`` (database clock); then it is completed."""

    at: datetime | None = None
    delay: timedelta | None = None

    kind = ScheduleKind.ONCE

    def fields(self) -> dict[str, Any]:
        return {"start_ts": self.at}


@dataclass(frozen=True, kw_only=True, slots=True)
class Interval(_Spec):
    """Fire every ``every`` ``unit`` (SECONDS ... YEARS; default MINUTES, any case), on a
    grid anchored at ``start``. ``every`` may be a ``timedelta`` instead (then no ``unit``):
    a duration on the UTC timeline, in the largest of hours, minutes or seconds that
    divides it."""

    every: int | timedelta
    unit: str | None = None
    start: datetime | None = None
    time_zone: str | None = None

    kind = ScheduleKind.INTERVAL

    def fields(self) -> dict[str, Any]:
        every, unit = grid_step(self.every, self.unit)
        fields = {"frequency_unit": unit, "frequency_time": every, "start_ts": self.start}
        if self.time_zone is not None:
            fields["time_zone"] = self.time_zone
        return fields


# Units a timedelta ``every`` is written in, largest first: durations only (days and longer
# step the wall clock of the schedule's zone, which a timedelta does not say).
DURATION_UNITS = (
    (3600, FrequencyUnit.HOURS),
    (60, FrequencyUnit.MINUTES),
    (1, FrequencyUnit.SECONDS),
)


def grid_step(every: Any, unit: Any) -> tuple[Any, Any]:
    """``every`` and ``unit`` as the schedule stores them: a ``timedelta`` becomes a number
    of hours, minutes or seconds; a unit's name is upper-cased (``"seconds"`` works)."""
    if isinstance(every, timedelta):
        if unit is not None:
            raise ValidationError(
                {"every": _("Give every= as a timedelta, or as a number with unit=; not both.")},
                code="every_and_unit",
            )
        seconds, rest = divmod(every, timedelta(seconds=1))
        if seconds < 1 or rest:
            raise ValidationError(
                {"every": _("A timedelta every= must be whole seconds, at least one.")},
                code="invalid_every",
            )
        size, name = next((size, name) for size, name in DURATION_UNITS if seconds % size == 0)
        return seconds // size, name.value
    if unit is None:
        return every, FrequencyUnit.MINUTES.value
    return every, unit.upper() if isinstance(unit, str) else unit


@dataclass(frozen=True, kw_only=True, slots=True)
class Cron(_Spec):
    """Fire at the matches of ``cron`` on the wall clock of ``time_zone``."""

    cron: str
    time_zone: str = "UTC"
    start: datetime | None = None

    kind = ScheduleKind.CRON

    def fields(self) -> dict[str, Any]:
        return {"cron_expression": self.cron, "time_zone": self.time_zone, "start_ts": self.start}


Spec = Once | Interval | Cron

# The columns of a one-shot given by delay= that the insert computes from the statement's clock
# (statement_timestamp() + delay): no round trip to read the database's clock first.
TIMED = ("start_ts", "next_run_ts", "next_slot_ts")

# The options every kind takes, and the Schedule field each sets.
OPTIONS = {
    "end": "end_ts",
    "max_fires": "max_fires",
    "misfire_policy": "misfire_policy",
    "misfire_grace_seconds": "misfire_grace_seconds",
    "catch_up_limit": "catch_up_limit",
    "jitter_seconds": "jitter_seconds",
    "priority": "priority",
}

# A Schedule field by the name its caller gave it (api.create_*, api.bulk_create, specs).
SPEC_FIELDS = {
    "schedule_name": "name",
    "idempotency_key": "key",
    "event_topic": "topic",
    "event_data": "data",
    "frequency_time": "every",
    "frequency_unit": "unit",
    "cron_expression": "cron",
    "end_ts": "end",
}


def spec_field(field: str, spec: Any) -> str:
    """The name a caller of ``spec`` gave ``field`` (a Schedule field); an instance's errors
    keep the model's names."""
    if isinstance(spec, Schedule):
        return field
    if field == "start_ts":
        return "at" if isinstance(spec, Once) else "start"
    return SPEC_FIELDS.get(field, field)


def in_callers_words(exc: django_exceptions.ValidationError, spec: Any) -> ValidationError:
    """``exc`` keyed by the names the caller of ``spec`` used (``every``, not
    ``frequency_time``), each refused choice listing the choices."""
    if not hasattr(exc, "error_dict"):
        return exc if isinstance(exc, ValidationError) else ValidationError(exc.error_list)
    errors: dict[str, list[Any]] = {}
    for field, messages in exc.error_dict.items():
        said = [_with_choices(field, error) for error in messages]
        errors.setdefault(
            field if field == NON_FIELD_ERRORS else spec_field(field, spec), []
        ).extend(said)
    return ValidationError(errors)


def _with_choices(field: str, error: Any) -> Any:
    if getattr(error, "code", None) != "invalid_choice":
        return error
    try:
        choices = getattr(Schedule._meta.get_field(field), "choices", None)
    except Exception:  # not a model field
        return error
    if not choices:
        return error
    value = (error.params or {}).get("value")
    return ValidationError(not_a_choice(value, choices), code="invalid_choice")


def not_a_choice(value: Any, choices: Any) -> str:
    """The message of a value that is not one of ``choices`` ((value, label) pairs), which
    lists them: the same at every door (the Python API, REST, the commands)."""
    names = ", ".join(str(choice) for choice, _label in choices)
    return _("%(value)r is not one of %(names)s.") % {"value": value, "names": names}


class Builder:
    """Unsaved ``Schedule`` instances from specs, as ``Schedule(**fields)`` would make them,
    without running ``Model.__init__`` for each (a copy of one default instance's values)."""

    _shared: Builder | None = None

    @classmethod
    def shared(cls) -> Builder:
        """One builder per process (the defaults it copies do not change)."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        template = Schedule()
        self._defaults = {
            name: value for name, value in template.__dict__.items() if name != "_state"
        }
        self._pk = Schedule._meta.pk
        assert self._pk is not None

    def build(self, spec: Spec) -> Schedule:
        schedule = Schedule.__new__(Schedule)
        values = schedule.__dict__
        values.update(self._defaults)
        values["_state"] = ModelState()
        schedule_id = self._pk.get_default()
        values["schedule_id"] = schedule_id
        values["event_data"] = {} if spec.data is None else spec.data
        values["host_id"] = resolve_host(spec.host_id)
        values["schedule_kind"] = spec.kind
        values["event_topic"] = spec.topic
        values["event_type"] = spec.event_type
        values["origin"] = ScheduleOrigin.API
        values["idempotency_key"] = spec.key
        values["schedule_name"] = spec.name if spec.name is not None else default_name(schedule)
        for option, field in OPTIONS.items():
            value = getattr(spec, option)
            if value is not None:
                values[field] = value
        values.update(spec.fields())
        return schedule


def default_name(schedule: Schedule) -> str:
    """The name of a schedule created without one, at every door: its idempotency key when
    it has one, else its id."""
    key = schedule.idempotency_key
    return key if key else str(schedule.schedule_id)


def database_defaults(schedule: Schedule) -> list[str]:
    """The columns the database fills (``db_default`` and no Python default, and generated
    columns such as ``bucket_key``): not named in an insert, read back from its
    ``RETURNING``. Reads the instance's values directly: a generated field is absent
    until saved, and ``getattr`` would query for it."""
    values = schedule.__dict__
    return [
        column
        for column, attname, generated in _filled_by_database()
        if generated or isinstance(values.get(attname), DatabaseDefault)
    ]


_FILLED: list[tuple[str, str, bool]] = []


def _filled_by_database() -> list[tuple[str, str, bool]]:
    """(column, attribute, generated) of the fields the database may fill, in column
    order: the generated ones and those with a ``db_default`` (only those can hold a
    ``DatabaseDefault``)."""
    if not _FILLED:
        _FILLED.extend(
            (str(field.column), field.attname, bool(getattr(field, "generated", False)))
            for field in Schedule._meta.concrete_fields
            if getattr(field, "generated", False) or field.has_db_default()
        )
    return _FILLED
