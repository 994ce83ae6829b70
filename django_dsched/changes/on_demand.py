"""Fires on demand: run now (:func:`trigger`) and backfills (:func:`backfill`), through
the exactly-once path of the fire path; and the slots of a range (:func:`slots_between`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.utils.translation import gettext as _

from django_dsched.changes import audit, permissions
from django_dsched.conf import app_settings
from django_dsched.enums import PLANNED, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.firing.on_demand import fire_on_demand
from django_dsched.history import horizon
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now

# Most slots one backfill may fire.
MAX_BACKFILL = 10_000


# A backfill fires the past slots of a completed schedule too.
BACKFILLABLE = (*PLANNED, ScheduleState.COMPLETED.value)


def _fire(schedule: Schedule, slots: list[datetime], *, trigger: str, actor: Any) -> int:
    """Fire ``slots`` now if the schedule's current state allows it (checked under lock).

    One statement (the row's lock, the events, their outbox messages and the new version),
    whole or absent by itself: no transaction or savepoint of its own, whose BEGIN and
    COMMIT (or SAVEPOINT and RELEASE) would be two more round trips. In a caller's
    transaction the row stays locked until it ends, as it did after the savepoint. A
    backfill's statement checks the history's horizon again, under its lock."""
    backfill = trigger == "backfill"
    with connections[app_settings.DATABASE].cursor() as cursor:
        done = fire_on_demand(
            cursor,
            schedule.schedule_id,
            slots,
            states=list(BACKFILLABLE if backfill else PLANNED),
            trigger=trigger,
            actor=audit.actor_name(actor),
            guard=backfill,
        )
    if not done.found:
        raise ValidationError(
            _("This schedule is gone or was cancelled or completed meanwhile; nothing fired."),
            code="state_changed",
        )
    if done.before_horizon:  # a purge moved the horizon since it was read
        raise _purged(horizon.complete_since())
    return done.fired


def _purged(since: datetime | None) -> ValidationError:
    """The refusal of a backfill reaching before the history's horizon ``since``."""
    return ValidationError(
        _(
            "The history before %(since)s was purged (purge_history, or the retention of "
            "DSCHED_RETENTION_DAYS), so the database can no longer tell which slots before it "
            "fired: a backfill cannot reach before it. Backfill from %(since)s on."
        )
        % {"since": "?" if since is None else f"{since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"},
        code="history_purged",
    )


def trigger(schedule: Schedule, *, actor: Any = None) -> int:
    """Fire ``schedule`` once now, through the exactly-once path (returns 1). A user
    ``actor`` needs the permission to fire (:class:`.NotPermitted` otherwise)."""
    permissions.require(actor, permissions.FIRE)
    if schedule.state not in PLANNED:
        raise ValidationError(
            _("Only active or paused schedules can be run now; this one is %(state)s.")
            % {"state": schedule.get_state_display()},
            code="not_triggerable",
        )
    return _fire(schedule, [database_now()], trigger="manual", actor=actor)


def backfill(
    schedule: Schedule, start: datetime, end: datetime, *, actor: Any = None
) -> tuple[int, int]:
    """Fire each slot of ``schedule`` in ``[start, end]`` once, now.

    Slots that already fired are not fired again (the database refuses them). A range with a
    slot before the history's horizon is refused (a purge may have deleted the record of
    its fire: :mod:`django_dsched.history.horizon`), whatever the retention says. Returns
    ``(fired, already_fired)``. A user ``actor`` needs the permission to fire
    (:class:`.NotPermitted` otherwise).
    """
    permissions.require(actor, permissions.FIRE)
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError(_("Give timezone-aware times (with an offset or a zone)."))
    if end < start:
        raise ValidationError(_("The end of the range must not be before its start."))
    if schedule.state == ScheduleState.CANCELLED:
        raise ValidationError(_("A cancelled schedule cannot be backfilled."))
    now = database_now()
    if end > now:
        raise ValidationError(_("A backfill covers the past only; the end is in the future."))
    slots = slots_between(schedule, start, end, limit=MAX_BACKFILL + 1)
    if len(slots) > MAX_BACKFILL:
        raise ValidationError(
            _("That range holds more than %(limit)d slots; backfill it in parts.")
            % {"limit": MAX_BACKFILL}
        )
    if not slots:
        return 0, 0
    # Events a purge deleted can no longer refuse a slot that already fired: a range with
    # a slot before the history's horizon is refused (whatever the retention says now).
    since = horizon.complete_since()
    if since is not None and slots[0] < since:
        raise _purged(since)
    fired = _fire(schedule, slots, trigger="backfill", actor=actor)
    return fired, len(slots) - fired


def slots_between(
    schedule: Schedule, start: datetime, end: datetime, *, limit: int = 1000
) -> list[datetime]:
    """The schedule's slots in ``[start, end]`` (at most ``limit``), bounds applied."""
    table = schedule.timetable()
    rules = schedule.rules()
    slots: list[datetime] = []
    slot = table.slot_at_or_after(max(start, schedule.start_ts))
    while slot is not None and slot <= end and len(slots) < limit:
        if rules.end is not None and slot > rules.end:
            break
        slots.append(slot)
        slot = table.slot_after(slot)
    return slots
