"""Validating a new schedule in Python, with no query: the same rules and messages as
``Schedule.full_clean()``.

``full_clean()`` checks each CHECK constraint of ``schedule_t`` with its own query (and the
unique name with one more): some twenty round trips per schedule. Here each CHECK
constraint has a Python twin (:data:`TWINS`) that gives the constraint's own message, and
field validation is memoised per value within one call (a bulk create of 10,000 reminders
to one topic validates the topic once). The unique constraints are left to the database:
the insert skips a conflicting row (``ON CONFLICT DO NOTHING``) and the caller turns a
skipped row into the same error ``full_clean()`` gives (:func:`unique_name_error`). The
database's constraints stay as the last line: an ``IntegrityError`` naming one of them
becomes that constraint's ``ValidationError`` (:func:`constraint_error`).

A test walks ``Schedule._meta.constraints`` and checks that each CHECK constraint has a
twin here that agrees with the database on the same instances, with the same message.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any

from django.core import exceptions as django_exceptions
from django.core.exceptions import NON_FIELD_ERRORS
from django.db import IntegrityError
from django.db.models import CheckConstraint, UniqueConstraint, UUIDField
from django.db.models.expressions import DatabaseDefault

from django_dsched.conf import app_settings
from django_dsched.enums import (
    CalendarPolicy,
    FrequencyUnit,
    MisfirePolicy,
    OverlapPolicy,
    ScheduleKind,
    ScheduleOrigin,
    ScheduleState,
)
from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule
from django_dsched.models.health import MAX_SECONDS
from django_dsched.models.recurrence import MAX_CALENDARS
from django_dsched.models.times import EARLIEST, LATEST, SCHEDULE_TIMES

_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")


def _identifier(value: Any) -> bool:
    return not isinstance(value, str) or _IDENTIFIER.fullmatch(value) is not None


def _maybe(value: Any, test: Callable[[Any], bool]) -> bool:
    """SQL's rule for a CHECK: NULL passes."""
    return value is None or test(value)


def _in_range(value: Any) -> bool:
    """A time a row may hold (models/times.py); what is not an aware time yet (a database
    default, a naive time refused by the field's own validator) is left to the rest."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return True
    try:
        return EARLIEST <= value < LATEST
    except OverflowError:  # at the very ends of the calendar, with an offset
        return False


_UNITS = frozenset([*FrequencyUnit.values, ""])
_KINDS = frozenset(ScheduleKind.values)
_POLICIES = frozenset(MisfirePolicy.values)
_ORIGINS = frozenset(ScheduleOrigin.values)
_STATES = frozenset(ScheduleState.values)
_OVERLAPS = frozenset(OverlapPolicy.values)
_CALENDAR_POLICIES = frozenset(CalendarPolicy.values)


# name: (the fields the constraint reads, whether a schedule satisfies it). A constraint
# reading a field that already has an error is not checked, as full_clean() does.
TWINS: dict[str, tuple[tuple[str, ...], Callable[[Schedule], bool]]] = {
    "dsched_schedule_frequency_positive": (
        ("frequency_time",),
        lambda s: _maybe(s.frequency_time, lambda v: v > 0),
    ),
    "dsched_schedule_unit_valid": (
        ("frequency_unit",),
        lambda s: _maybe(s.frequency_unit, lambda v: v in _UNITS),
    ),
    "dsched_schedule_kind_valid": (
        ("schedule_kind",),
        lambda s: _maybe(s.schedule_kind, lambda v: v in _KINDS),
    ),
    "dsched_schedule_interval_complete": (
        ("schedule_kind", "frequency_time", "frequency_unit"),
        lambda s: (
            s.schedule_kind != ScheduleKind.INTERVAL
            or (s.frequency_time is not None and s.frequency_unit != "")
        ),
    ),
    "dsched_schedule_cron_complete": (
        ("schedule_kind", "cron_expression"),
        lambda s: s.schedule_kind != ScheduleKind.CRON or s.cron_expression != "",
    ),
    "dsched_schedule_misfire_policy_valid": (
        ("misfire_policy",),
        lambda s: _maybe(s.misfire_policy, lambda v: v in _POLICIES),
    ),
    "dsched_schedule_origin_valid": (
        ("origin",),
        lambda s: _maybe(s.origin, lambda v: v in _ORIGINS),
    ),
    "dsched_schedule_end_after_start": (
        ("end_ts", "start_ts"),
        lambda s: s.end_ts is None or s.start_ts is None or s.end_ts > s.start_ts,
    ),
    "dsched_schedule_max_fires_positive": (
        ("max_fires",),
        lambda s: _maybe(s.max_fires, lambda v: v >= 1),
    ),
    "dsched_schedule_timing_bounds": (
        ("catch_up_limit", "jitter_seconds", "misfire_grace_seconds"),
        lambda s: (
            _maybe(s.catch_up_limit, lambda v: 1 <= v <= 10_000)
            and _maybe(s.jitter_seconds, lambda v: 0 <= v <= 86_400)
            and _maybe(s.misfire_grace_seconds, lambda v: v >= 0)
        ),
    ),
    "dsched_schedule_state_valid": (
        ("state",),
        lambda s: _maybe(s.state, lambda v: v in _STATES),
    ),
    "dsched_schedule_active_matches_state": (
        ("active", "state"),
        lambda s: (
            (s.active is True and s.state == ScheduleState.ACTIVE)
            or (s.active is False and s.state != ScheduleState.ACTIVE)
        ),
    ),
    "dsched_schedule_name_not_empty": (
        ("schedule_name",),
        lambda s: s.schedule_name != "",
    ),
    "dsched_schedule_topic_valid": (("event_topic",), lambda s: _identifier(s.event_topic)),
    "dsched_schedule_type_valid": (("event_type",), lambda s: _identifier(s.event_type)),
    "dsched_schedule_event_data_object": (
        ("event_data",),
        lambda s: s.event_data is None or isinstance(s.event_data, dict),
    ),
    "dsched_schedule_key_not_empty": (
        ("idempotency_key",),
        lambda s: s.idempotency_key != "",
    ),
    "dsched_schedule_health_bounds": (
        ("health_grace_seconds", "failure_tolerance", "max_runtime_seconds"),
        lambda s: (
            _maybe(s.health_grace_seconds, lambda v: 0 <= v <= MAX_SECONDS)
            and _maybe(s.failure_tolerance, lambda v: 0 <= v <= 1_000_000)
            and _maybe(s.max_runtime_seconds, lambda v: 1 <= v <= MAX_SECONDS)
        ),
    ),
    "dsched_schedule_times_in_range": (
        SCHEDULE_TIMES,
        lambda s: all(_in_range(getattr(s, name)) for name in SCHEDULE_TIMES),
    ),
    # The overlap and failure policies (models/overlap.py).
    "dsched_schedule_overlap_valid": (
        ("overlap_policy", "schedule_kind", "held_by"),
        lambda s: (
            _maybe(s.overlap_policy, lambda v: v in _OVERLAPS)
            and (
                s.overlap_policy == OverlapPolicy.ALLOW_ALL or s.schedule_kind != ScheduleKind.ONCE
            )
            and (s.overlap_policy != OverlapPolicy.ALLOW_ALL or s.held_by is None)
        ),
    ),
    # The recurrence rule and the calendars (models/recurrence.py).
    "dsched_schedule_rrule_complete": (
        ("schedule_kind", "rrule"),
        lambda s: s.schedule_kind != ScheduleKind.RRULE or s.rrule != "",
    ),
    "dsched_schedule_calendars_valid": (
        ("calendar_policy", "calendar_ids"),
        lambda s: (
            _maybe(s.calendar_policy, lambda v: v in _CALENDAR_POLICIES)
            and _maybe(s.calendar_ids, lambda v: 1 <= len(v) <= MAX_CALENDARS)
        ),
    ),
}

# The fields whose values differ from one schedule to the next (each its own id, name, key
# and data): validated for every schedule; the others once per shape (FieldCache).
PER_ITEM = ("schedule_id", "schedule_name", "event_data", "idempotency_key")
# The twins that read a PER_ITEM field.
ITEM_TWINS = [holds for fields, holds in TWINS.values() if set(fields) & set(PER_ITEM)]

CONSTRAINTS = {constraint.name: constraint for constraint in Schedule._meta.constraints}

# The text of a UUID, as a schedule named after its own id is named.
_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# json.dumps(value, separators=(",", ":"), allow_nan=False), built once (json.dumps makes
# a new encoder per call when given options).
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def plainly_valid_event_data(value: Any) -> bool:
    """True only when ``value`` passes every rule of the event data's full validation
    (``EventDataField.clean()``: its JSON check and :func:`validate_event_data`'s object,
    depth, text and size rules), decided with one ``json.dumps``; False means "not
    decided": the full validation then runs and gives the exact error, if any."""
    return plain_event_data_text(value) is not None


def plain_event_data_text(value: Any) -> str | None:
    """:func:`plainly_valid_event_data`, giving the compact JSON text it decided on (the
    text to store: the same ``jsonb`` as ``json.dumps``'s), or None when undecided."""
    if type(value) is not dict:
        return None
    try:
        text = _COMPACT.encode(value)
    except (TypeError, ValueError, RecursionError):  # the full check says which
        return None
    # The same text validate_event_data measures; ASCII (ensure_ascii), so one character
    # is one byte.
    if len(text) > app_settings.EVENT_DATA_MAX_BYTES:
        return None
    # A NUL or any surrogate (lone or paired) is written as an escape: left undecided.
    if "\\u0000" in text or "\\ud" in text:
        return None
    # Every level of nesting opens a bracket: no more brackets than levels allowed (in
    # strings or not) cannot be too deep.
    if text.count("{") + text.count("[") > app_settings.EVENT_DATA_MAX_DEPTH:
        return None
    return text


def event_data_json(
    value: Any, text: str | None, encoder: type[json.JSONEncoder] | None
) -> str | None:
    """Event data as the JSON text an insert sends: ``text`` (the one its check made, see
    :meth:`FieldCache.take_text`) when given and the field has no encoder of its own, else
    the data encoded."""
    if value is None:
        return None
    if text is not None and encoder is None:
        return text
    return json.dumps(value, cls=encoder)


NAME_UNIQUE = "dsched_schedule_name_unique"
KEY_UNIQUE = "dsched_schedule_key_unique"


class FieldCache:
    """Field validation memoised by value, for the schedules of one call.

    A field's ``clean()`` depends on the value alone (no validator of ``Schedule`` reads
    the instance), so a value seen before has the same result.
    """

    # Most results one cache holds; past it, it starts again (names and keys, unique to a
    # schedule, would otherwise grow it without bound).
    LIMIT = 50_000
    # Most shapes remembered (see known_good); past it, it starts again.
    SHAPES = 1_000
    _shared: FieldCache | None = None

    @classmethod
    def shared(cls) -> FieldCache:
        """One cache per process: field validation depends on the value alone."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        self._results: dict[tuple[str, type, Hashable], tuple[Any, Any]] = {}
        # (event data, its JSON text) of the last check that accepted it in one encoding,
        # for take_text(); one slot, overwritten by every check of event data.
        self._text: tuple[Any, str] | None = None
        self._fields = [
            (
                field,
                field.attname,
                field.name,
                field.blank,
                field.empty_values,
                field.primary_key,
                _identity_type(field),
                self._fast_accept(field),
            )
            for field in Schedule._meta.fields
            if not field.generated
        ]

        self._item_fields = [entry for entry in self._fields if entry[1] in PER_ITEM]
        self._shape_names = [entry[1] for entry in self._fields if entry[1] not in PER_ITEM]
        # Shape (the values of every field but PER_ITEM's) -> its cleaned values, for the
        # shapes that passed every check: fields, clean() (one-shots) and the twins.
        self._shapes: dict[tuple[tuple[Any, ...], tuple[type, ...]], dict[str, Any]] = {}

    def take_text(self, value: Any) -> str | None:
        """The compact JSON text of the event data ``value`` when the check that just ran
        on it accepted it in one encoding (the text to store), or None. Taken: asked again,
        it is None. Another thread's check in between leaves None (the insert encodes)."""
        found, self._text = self._text, None
        return found[1] if found is not None and found[0] is value else None

    def _accept_event_data(self, value: Any) -> bool:
        text = plain_event_data_text(value)
        # Holding the value keeps its id its own while the slot holds it.
        self._text = None if text is None else (value, text)
        return text is not None

    def _fast_accept(self, field: Any) -> Callable[[Any], bool] | None:
        """For the fields whose value differs in every schedule (so memoising by value
        does not help), a test that accepts the common valid values without ``clean()``
        (whose result they would get unchanged); anything it does not accept is cleaned
        as usual."""
        if field.attname == "event_data":
            return self._accept_event_data
        if field.attname == "schedule_name":
            # A name that is a UUID's text (a one-shot named after its id): its validators
            # (length, printable characters) read only its length and characters, which
            # every UUID's text shares; accepted when one such text passes.
            try:
                field.clean(str(uuid.UUID(int=0)), None)
            except django_exceptions.ValidationError:
                return None
            return lambda value: type(value) is str and _UUID_TEXT.fullmatch(value) is not None
        return None

    def shape(self, schedule: Schedule) -> tuple[tuple[Any, ...], tuple[type, ...]] | None:
        """The key of ``schedule``'s shape, or None when a value cannot be hashed."""
        found = tuple(map(schedule.__dict__.__getitem__, self._shape_names))
        key = (found, tuple(map(type, found)))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def known_good(
        self, schedule: Schedule, key: tuple[tuple[Any, ...], tuple[type, ...]] | None
    ) -> bool:
        """Validate ``schedule`` quickly when its shape passed before: set the shape's
        cleaned values, then check only what differs between schedules (PER_ITEM's fields
        and the twins that read them; ``clean()`` again unless a one-shot, whose ``clean()``
        reads the shape alone). False (nothing decided) when the shape is new or anything
        fails: the caller then validates the whole schedule, for the exact errors."""
        if key is None:
            return False
        cleaned = self._shapes.get(key)
        if cleaned is None:
            return False
        values = schedule.__dict__
        saved = {attname: values[attname] for attname in PER_ITEM}
        values.update(cleaned)
        ok = not self.clean_fields(schedule, self._item_fields) and all(
            holds(schedule) for holds in ITEM_TWINS
        )
        if ok and values["schedule_kind"] != ScheduleKind.ONCE:
            try:
                schedule.clean()
            except django_exceptions.ValidationError:
                ok = False
        if not ok:  # put back the values as given (the key holds the shape's)
            values.update(saved)
            values.update(zip(self._shape_names, key[0], strict=True))
        return ok

    def remember(
        self, key: tuple[tuple[Any, ...], tuple[type, ...]] | None, schedule: Schedule
    ) -> None:
        """Record that the shape ``key`` (read before cleaning) passed every check."""
        if key is None:
            return
        if len(self._shapes) >= self.SHAPES:
            self._shapes.clear()
        values = schedule.__dict__
        self._shapes[key] = {attname: values[attname] for attname in self._shape_names}

    def clean_fields(
        self, schedule: Schedule, fields: list[tuple[Any, ...]] | None = None
    ) -> dict[str, list[Any]]:
        """``Model.clean_fields()``: set each field's cleaned value; return the errors."""
        errors: dict[str, list[Any]] = {}
        values = schedule.__dict__
        results = self._results
        for field, attname, name, blank, empty, primary, identity, fast in fields or self._fields:
            raw = values[attname]
            if identity is not None and type(raw) is identity:
                continue  # clean() returns it unchanged and cannot refuse it
            if fast is not None and fast(raw):
                continue  # clean() would return it unchanged
            if blank and raw in empty:
                continue
            if isinstance(raw, DatabaseDefault):
                continue
            key: tuple[str, type, Hashable] | None = None
            if not primary:
                key = (attname, type(raw), raw)
                try:
                    found = results.get(key)
                except TypeError:  # unhashable (event data): validated each time
                    key, found = None, None
                if found is not None:
                    cleaned, error = found
                    if error is not None:
                        errors[name] = error
                    else:
                        values[attname] = cleaned
                    continue
            try:
                cleaned, error = field.clean(raw, schedule), None
            except django_exceptions.ValidationError as exc:
                cleaned, error = raw, exc.error_list
            if key is not None:
                if len(results) >= self.LIMIT:
                    results.clear()
                results[key] = (cleaned, error)
            if error is not None:
                errors[name] = error
            else:
                values[attname] = cleaned
        return errors


def _identity_type(field: Any) -> type | None:
    """The type whose values ``field.clean()`` returns unchanged and never refuses: a UUID
    in a ``UUIDField`` with no validators and no choices (each schedule's own id, unique
    per schedule, so memoising it by value would not help)."""
    if isinstance(field, UUIDField) and not field.validators and not field.choices:
        return uuid.UUID
    return None


def validate_new(schedule: Schedule, cache: FieldCache | None = None) -> None:
    """What ``schedule.full_clean()`` checks before an insert, without a query.

    Raises the package's :class:`ValidationError` with the same ``message_dict``.
    """
    key = cache.shape(schedule) if cache is not None else None
    if cache is not None and cache.known_good(schedule, key):
        return
    errors: dict[str, list[Any]] = (cache or FieldCache()).clean_fields(schedule)
    try:
        schedule.clean()
    except django_exceptions.ValidationError as exc:
        errors = exc.update_error_dict(errors)
    failed = set(errors)
    for name, (fields, holds) in TWINS.items():
        if failed.intersection(fields):
            continue
        if not holds(schedule):
            message = CONSTRAINTS[name].get_violation_error_message()
            errors.setdefault(NON_FIELD_ERRORS, []).append(
                django_exceptions.ValidationError(message, code="constraint")
            )
    if errors:
        raise ValidationError(errors)
    if cache is not None:
        cache.remember(key, schedule)


def unique_name_error(schedule: Schedule) -> ValidationError:
    """The error ``full_clean()`` gives for a name already taken in the host."""
    constraint = CONSTRAINTS[NAME_UNIQUE]
    assert isinstance(constraint, UniqueConstraint)
    return ValidationError(
        {NON_FIELD_ERRORS: [schedule.unique_error_message(Schedule, tuple(constraint.fields))]}
    )


def constraint_error(exc: IntegrityError, schedule: Schedule | None = None) -> ValidationError:
    """The ``ValidationError`` of the constraint an ``IntegrityError`` names (the last line:
    Python validation should have refused the row first). Re-raises what it cannot map."""
    name = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if name == NAME_UNIQUE and schedule is not None:
        return unique_name_error(schedule)
    constraint = CONSTRAINTS.get(name or "")
    if isinstance(constraint, CheckConstraint):
        return ValidationError(
            {NON_FIELD_ERRORS: [constraint.get_violation_error_message()]}, code="constraint"
        )
    raise exc
