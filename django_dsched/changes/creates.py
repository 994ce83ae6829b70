"""Creating schedules in one statement each: validation in Python, then one ``INSERT`` that
writes the schedules and their "created" audit events together.

The statement (one schedule: :mod:`single_insert`, naming only the columns that differ from
their database defaults; many at once: :mod:`bulk_insert`) inserts the audit event from
the row it inserted (a data-modifying CTE): a crash leaves both or neither. It skips rows
that conflict with a unique constraint (``ON CONFLICT DO NOTHING``): a row with an
idempotency key that exists is then the existing schedule (read back in a second
statement, which under READ COMMITTED sees a winner that committed while this statement
waited for it), and any other skipped row took a name in use, the same error
``full_clean()`` gives.

A one-shot created with ``delay=`` gets its time from the statement itself
(``statement_timestamp() + delay``): no round trip to read the database's clock first.
Other kinds without a start read the clock once per call (:class:`Clock`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from django_dsched.changes import permissions, quotas
from django_dsched.changes.constraints import (
    FieldCache,
    unique_name_error,
    validate_new,
)
from django_dsched.changes.routes import check_routed
from django_dsched.changes.single_insert import insert_one
from django_dsched.changes.specs import (
    Builder,
    Cron,
    Interval,
    Once,
    Spec,
    default_name,
    in_callers_words,
)
from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.exceptions import QuotaExceeded, ValidationError
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.runtime.logs import get_logger
from django_dsched.timetables.misfire import backlog_window

log = get_logger(__name__)

# The longest delay= of a one-shot (its time is computed by the database, so the bound is
# checked here: it keeps the time far inside the supported range).
MAX_DELAY = timedelta(days=36_525)


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
    """A validated, placed, unsaved schedule; ``delay`` set when SQL computes its time;
    ``data_text`` the event data's JSON text when its check made it (the insert sends it
    instead of encoding the data again)."""

    schedule: Schedule
    delay: timedelta | None
    data_text: str | None = None
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
        try:
            schedule = self.builder.build(spec)
            delay = None
            if isinstance(spec, Once):
                delay = self._once_time(schedule, spec)
            elif spec.start is None:
                schedule.start_ts = self.clock.now()
            data_text = self._validated(schedule)
        except ValidationError as exc:
            raise in_callers_words(exc, spec) from None
        if delay is None:
            schedule.place(schedule.start_ts)
        return Prepared(schedule, delay, data_text)

    def prepare_instance(self, schedule: Schedule) -> Prepared:
        """An unsaved ``Schedule`` built by a caller (admin, REST, declared schedules): no
        start means now, as ``Schedule.save()`` has it."""
        values = schedule.__dict__  # start_ts and next_run_ts are unset until saved
        if not schedule.schedule_name:
            schedule.schedule_name = default_name(schedule)  # as the Python API names it
        if values.get("start_ts") is None:
            schedule.start_ts = self.clock.now()
        data_text = self._validated(schedule)
        if values.get("next_run_ts") is None:
            schedule.place(schedule.start_ts)
        return Prepared(schedule, None, data_text)

    def _validated(self, schedule: Schedule) -> str | None:
        """Validate ``schedule`` and do what ``Schedule.save()`` does before an insert; the
        event data's JSON text its check made, if any. Taken even when validation fails:
        the process-wide cache keeps nothing of the caller's."""
        try:
            validate_new(schedule, self.cache)
            check_routed(schedule)
        finally:
            data_text = self.cache.take_text(schedule.event_data)
        schedule.active = schedule.state == ScheduleState.ACTIVE
        if schedule.schedule_kind != ScheduleKind.INTERVAL:
            schedule.frequency_unit, schedule.frequency_time = "", None
        return data_text

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


def create(spec: Spec, *, actor: Any = None, may_fire: bool | None = None) -> Schedule:
    """Create the schedule ``spec`` describes, or return the one with its key.

    A schedule that would fire a backlog at once needs the permission to fire
    (:func:`.permissions.check_new`): ``may_fire`` says whether the caller has it; None
    (the default) asks the actor (a user's permission; code may).

    One statement (two when the kind needs the database's clock first; one more when the
    key exists): no transaction of its own, so it adds no BEGIN/COMMIT round trips and
    leaves a caller's transaction usable after a validation error.
    """
    preparer = Preparer()
    return _create(preparer.prepare(spec), preparer, actor=actor, may_fire=may_fire)[0]


def create_instance(
    schedule: Schedule, *, actor: Any = None, may_fire: bool | None = None
) -> tuple[Schedule, bool]:
    """Insert the unsaved ``schedule`` (validated first) with its "created" event; or, if
    its idempotency key exists, return the existing schedule. ``(schedule, created)``.
    ``may_fire`` as for :func:`create`."""
    preparer = Preparer()
    return _create(preparer.prepare_instance(schedule), preparer, actor=actor, may_fire=may_fire)


def _create(
    item: Prepared, preparer: Preparer, *, actor: Any, may_fire: bool | None
) -> tuple[Schedule, bool]:
    if may_fire is None:
        may_fire = permissions.may(actor, permissions.FIRE)
    if not may_fire and permissions.fires_a_backlog(item.schedule, preparer.clock.now):
        raise permissions.refusal(permissions.FIRE, permissions.BACKLOG_WHY)
    host = item.schedule.host_id
    refused: QuotaExceeded | None = None
    if quotas.may_apply(host):
        # The host's quota lock, the count and the insert in one transaction (none of its
        # own inside the caller's); the refusal is raised once it is left, so the caller's
        # transaction stays usable.
        with transaction.atomic(using=app_settings.DATABASE, savepoint=False):
            refused = quotas.room(host, 1)
            inserted = refused is None and _insert(item, actor)
    else:
        inserted = _insert(item, actor)
    if inserted:
        note_lateness(item.schedule)
        return item.schedule, True
    key = item.schedule.idempotency_key
    if key is not None:
        existing = existing_by_key([item]).get((item.schedule.host_id, key))
        if existing is not None:
            return existing, False  # a retry of a create that succeeded: no new place
    if refused is not None:
        raise refused
    raise unique_name_error(item.schedule)


@dataclass(frozen=True, slots=True)
class Late:
    """A one-shot created after its time: by how much (the database's clock at the insert
    minus its time) and what the scheduler will do (its misfire rules, as for any missed
    slot): fire it at once, late, or skip it (the schedule completes without firing,
    ``misfire_count`` 1) when it is later than its grace (``SKIP``'s grace is
    ``misfire_grace_seconds``, else ``DSCHED_MISFIRE_GRACE_SECONDS``)."""

    by: timedelta
    skipped: bool

    @property
    def outcome(self) -> str:
        return LATE_SKIPPED if self.skipped else LATE_FIRES_NOW

    def describe(self, name: str) -> str:
        seconds = int(self.by.total_seconds())
        if self.skipped:
            return _(
                "The one-shot %(name)s was created %(seconds)d s after its time, later than its "
                "misfire grace: it will be skipped (completed without firing)."
            ) % {"name": name, "seconds": seconds}
        return _(
            "The one-shot %(name)s was created %(seconds)d s after its time: it fires now, "
            "late. Give misfire_policy SKIP to drop one-shots whose time has passed."
        ) % {"name": name, "seconds": seconds}


LATE_FIRES_NOW, LATE_SKIPPED = "FIRES_NOW", "SKIPPED"


def lateness(schedule: Schedule) -> Late | None:
    """How late the one-shot ``schedule`` was created (its ``created_ts``, the database's
    clock, after its time), or None: on time, or not a one-shot. A one-shot due for less
    than the backlog window (a poll) is on time."""
    if schedule.schedule_kind != ScheduleKind.ONCE:
        return None
    created, at = schedule.__dict__.get("created_ts"), schedule.__dict__.get("start_ts")
    if not isinstance(created, datetime) or not isinstance(at, datetime):
        return None
    rules = schedule.rules()
    late = created - rules.run_time(schedule.timetable(), at)  # as the fire path counts it
    if late < backlog_window():
        return None
    grace = rules.grace()
    return Late(by=late, skipped=grace is not None and late > grace)


def note_lateness(schedule: Schedule) -> None:
    """Set ``schedule.late`` (:class:`Late` or None) on a created one-shot, and log a late
    one. Every door reads it: the Python API's caller, REST's answer, the admin's message."""
    late = lateness(schedule)
    schedule.late = late  # type: ignore[attr-defined]
    if late is not None:
        log.warning("%s", late.describe(schedule.schedule_name))


def _insert(item: Prepared, actor: Any) -> bool:
    return insert_one(item.schedule, item.delay, actor=actor, data_text=item.data_text)


__all__ = [
    "LATE_FIRES_NOW",
    "LATE_SKIPPED",
    "MAX_DELAY",
    "Clock",
    "Late",
    "Prepared",
    "Preparer",
    "create",
    "create_instance",
    "existing_by_key",
    "lateness",
    "note_lateness",
]
