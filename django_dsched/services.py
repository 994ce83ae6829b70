"""State changes of schedules: the one code path for the admin, the API and commands.

Each function runs inside the caller's transaction when there is one (else its own),
locks the rows it changes (waiting for a fire in flight to commit), bumps
``aggregate_version`` and writes an audit event with that version (:mod:`.audit`), so a
rolled-back caller leaves nothing behind and every change is in the schedule's history.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from django_dsched import audit
from django_dsched.changes import ChangeCount
from django_dsched.clock import database_now
from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import ConflictError, ValidationError
from django_dsched.models import Event, Schedule
from django_dsched.models.schedule import GRID_FIELDS
from django_dsched.scheduler.firing import fire_slots, reason
from django_dsched.validation import validate_plain_text

# Most slots one backfill may fire.
MAX_BACKFILL = 10_000


def _atomic() -> transaction.Atomic:
    return transaction.atomic(using=app_settings.DATABASE)


def _transition(
    schedules: QuerySet[Schedule],
    *,
    allowed: set[str],
    target: str,
    verb: str,
    actor: Any,
    change: Any = None,
    accept: Callable[[Schedule], bool] | None = None,
    **details: Any,
) -> ChangeCount:
    """Move each locked schedule whose state is ``allowed`` to ``target``, with an audit event.

    ``change(schedule, now)`` may adjust more fields; it returns their names. ``accept``
    may turn more schedules away (they count as skipped).
    """
    with _atomic():
        locked = list(schedules.select_for_update().order_by("pk"))
        eligible = [s for s in locked if s.state in allowed and (accept is None or accept(s))]
        if not eligible:
            return ChangeCount(changed=0, skipped=len(locked))
        now = database_now()
        events = []
        for schedule in eligible:
            before = schedule.state
            schedule.state = target
            fields = ["state", "active", "aggregate_version", "updated_ts"]
            if change is not None:
                fields += change(schedule, now)
            schedule.aggregate_version += 1
            schedule.updated_ts = now
            schedule.save(update_fields=fields)
            events.append(
                audit.event_for(
                    schedule,
                    verb,
                    actor=actor,
                    at=now,
                    changes={"state": [before, target]},
                    **details,
                )
            )
        Event.objects.bulk_create(events)
    return ChangeCount(changed=len(eligible), skipped=len(locked) - len(eligible))


def pause(
    schedules: QuerySet[Schedule],
    *,
    actor: Any = None,
    reason: str = "",
    until: datetime | None = None,
) -> ChangeCount:
    """Stop active schedules from firing; with ``until`` they resume by themselves then."""
    if until is not None and until.tzinfo is None:
        raise ValidationError(_("Give a timezone-aware time (with an offset or a zone)."))
    if len(reason) > 255:
        raise ValidationError(_("The reason is limited to 255 characters."))
    validate_plain_text(reason)

    def note(schedule: Schedule, now: datetime) -> list[str]:
        if until is not None and until <= now:
            raise ValidationError(_("The pause must end in the future."))
        schedule.paused_reason, schedule.paused_until = reason, until
        return ["paused_reason", "paused_until"]

    return _transition(
        schedules,
        allowed={ScheduleState.ACTIVE},
        target=ScheduleState.PAUSED,
        verb="paused",
        actor=actor,
        change=note,
        reason=reason,
        until=audit.plain(until),
    )


def resume(
    schedules: QuerySet[Schedule], *, actor: Any = None, catch_up: bool = False
) -> ChangeCount:
    """Let paused (or set-aside) schedules fire again.

    By default a schedule goes on from its first slot at or after now: slots that passed
    while it was paused do not fire. With ``catch_up=True`` they are handled by its
    misfire policy, as after downtime (the default policy fires the latest one once).
    A set-aside schedule that still cannot be planned stays set aside (it is skipped); a
    paused one that cannot be planned resumes on its old slot, and the scheduler sets it
    aside with its error (one mechanism for every row that cannot be planned).
    """

    def replace(schedule: Schedule, now: datetime) -> list[str]:
        schedule.paused_reason, schedule.paused_until = "", None
        schedule.set_aside_reason, schedule.set_aside_ts = "", None
        fields = ["paused_reason", "paused_until", "set_aside_reason", "set_aside_ts"]
        if not catch_up and schedule.next_slot_ts < now and planning_error(schedule) is None:
            schedule.place(now)
            fields += ["next_run_ts", "next_slot_ts", "state", "active"]
        return fields

    return _transition(
        schedules,
        allowed={ScheduleState.PAUSED, ScheduleState.SET_ASIDE},
        target=ScheduleState.ACTIVE,
        verb="resumed",
        actor=actor,
        change=replace,
        accept=lambda schedule: (
            schedule.state != ScheduleState.SET_ASIDE or planning_error(schedule) is None
        ),
        catch_up=catch_up,
    )


def planning_error(schedule: Schedule) -> str | None:
    """Why the scheduler could not plan ``schedule`` (as it would set it aside), or None."""
    try:
        table = schedule.timetable()
        table.slot_after(schedule.next_slot_ts)
        table.slot_at_or_before(database_now())
    except Exception as exc:  # whatever the fire path would trip on
        return reason(exc)
    return None


def cancel(schedules: QuerySet[Schedule], *, actor: Any = None) -> ChangeCount:
    """End schedules for good: a cancelled schedule never fires again and cannot resume."""
    return _transition(
        schedules,
        allowed={ScheduleState.ACTIVE, ScheduleState.PAUSED, ScheduleState.SET_ASIDE},
        target=ScheduleState.CANCELLED,
        verb="cancelled",
        actor=actor,
    )


def resume_expired_pauses(limit: int = 100) -> int:
    """Resume schedules whose pause ended (the leader calls this every heartbeat)."""
    with _atomic():
        due = Schedule.objects.filter(
            state=ScheduleState.PAUSED, paused_until__lte=database_now()
        ).select_for_update(skip_locked=True)[:limit]
        ids = list(due.values_list("pk", flat=True))
        if not ids:
            return 0
        return resume(Schedule.objects.filter(pk__in=ids), actor="scheduler").changed


def save_schedule(
    schedule: Schedule,
    changed_fields: list[str] | None = None,
    *,
    actor: Any = None,
    expected_version: int | None = None,
) -> Schedule:
    """Create ``schedule``, or write the ``changed_fields`` of an existing one.

    Validates first (nothing is written when invalid). An edit writes only the fields it
    changed, so it never overwrites what a fire wrote meanwhile; when a field that places
    the slots changed, the next run moves to the first slot of the new timetable at or after
    now (database clock), instead of firing a backlog. With ``expected_version`` (the
    ``aggregate_version`` the editor read) an edit of a schedule that changed since is
    refused with :class:`ConflictError`.
    """
    schedule.full_clean()
    with _atomic():
        if schedule._state.adding:
            schedule.save()
            audit_event = audit.event_for(
                schedule,
                "created",
                actor=actor,
                at=schedule.created_ts
                if isinstance(schedule.created_ts, datetime)
                else database_now(),
                definition=audit.definition(schedule),
            )
            audit_event.save()
            return schedule
        current = Schedule.objects.select_for_update().get(pk=schedule.pk)
        if expected_version is not None and current.aggregate_version != expected_version:
            raise ConflictError(
                _(
                    "This schedule changed since you opened it (version %(then)d, now "
                    "%(now)d): it fired or someone else edited it. Reload it and apply your "
                    "change again."
                )
                % {"then": expected_version, "now": current.aggregate_version},
                code="conflict",
            )
        if current.state == ScheduleState.CANCELLED:
            raise ValidationError(_("A cancelled schedule cannot be edited."), code="cancelled")
        fields = [f for f in (changed_fields or []) if f not in ("state", "active")]
        changes = {
            name: [audit.plain(getattr(current, name)), audit.plain(getattr(schedule, name))]
            for name in fields
            if getattr(current, name) != getattr(schedule, name)
        }
        if not changes:
            return schedule
        now = database_now()
        fields = list(changes)
        # Runtime state is the database's, not the (possibly stale) instance's.
        for name in ("next_run_ts", "next_slot_ts", "state", "active", "fire_count"):
            setattr(schedule, name, getattr(current, name))
        revived = schedule.state == ScheduleState.SET_ASIDE
        if revived:
            # The saved definition passed validation: back into the poll, from now.
            schedule.state = ScheduleState.ACTIVE
            schedule.set_aside_reason, schedule.set_aside_ts = "", None
            changes["state"] = [ScheduleState.SET_ASIDE.value, ScheduleState.ACTIVE.value]
            fields += ["set_aside_reason", "set_aside_ts"]
        if (revived or any(name in GRID_FIELDS for name in fields)) and schedule.state in (
            ScheduleState.ACTIVE,
            ScheduleState.PAUSED,
        ):
            state = schedule.state
            _place(schedule, now)
            if state == ScheduleState.PAUSED and schedule.state == ScheduleState.ACTIVE:
                schedule.state, schedule.active = state, False
            fields += ["next_run_ts", "next_slot_ts", "state", "active"]
        schedule.aggregate_version = current.aggregate_version + 1
        schedule.updated_ts = now
        schedule.save(update_fields=[*fields, "aggregate_version", "updated_ts"])
        audit.event_for(schedule, "edited", actor=actor, at=now, changes=changes).save()
    return schedule


def _place(schedule: Schedule, now: datetime) -> None:
    """``schedule.place(now)``, refusing a timetable the scheduler could not plan."""
    try:
        schedule.place(now)
    except ValidationError:
        raise
    except Exception as exc:  # whatever the fire path would set the schedule aside for
        raise ValidationError(
            _("The scheduler cannot plan this schedule: %(error)s") % {"error": reason(exc)},
            code="unplannable",
        ) from None


TRIGGERABLE = [ScheduleState.ACTIVE.value, ScheduleState.PAUSED.value]
BACKFILLABLE = [*TRIGGERABLE, ScheduleState.COMPLETED.value]


def _fire(schedule: Schedule, slots: list[datetime], *, trigger: str, actor: Any) -> int:
    """Fire ``slots`` now if the schedule's current state allows it (checked under lock)."""
    states = TRIGGERABLE if trigger == "manual" else BACKFILLABLE
    with _atomic(), connections[app_settings.DATABASE].cursor() as cursor:
        fired = fire_slots(
            cursor,
            schedule.schedule_id,
            slots,
            states=states,
            trigger=trigger,
            actor=audit.actor_name(actor),
        )
    if fired is None:
        raise ValidationError(
            _("This schedule is gone or was cancelled or completed meanwhile; nothing fired."),
            code="state_changed",
        )
    return fired


def trigger(schedule: Schedule, *, actor: Any = None) -> int:
    """Fire ``schedule`` once now, through the exactly-once path (returns 1)."""
    if schedule.state not in TRIGGERABLE:
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

    Slots that already fired are not fired again (the database refuses them). Returns
    ``(fired, already_fired)``.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError(_("Give timezone-aware times (with an offset or a zone)."))
    if end < start:
        raise ValidationError(_("The end of the range must not be before its start."))
    if schedule.state == ScheduleState.CANCELLED:
        raise ValidationError(_("A cancelled schedule cannot be backfilled."))
    now = database_now()
    if end > now:
        raise ValidationError(_("A backfill covers the past only; the end is in the future."))
    days = app_settings.RETENTION_DAYS
    if days is not None and start < now - timedelta(days=days):
        # Events older than the retention are deleted, so the database could no longer
        # refuse a slot that already fired: refuse the range instead.
        raise ValidationError(
            _("A backfill cannot reach back past the history retention (%(days)s days).")
            % {"days": days}
        )
    slots = slots_between(schedule, start, end, limit=MAX_BACKFILL + 1)
    if len(slots) > MAX_BACKFILL:
        raise ValidationError(
            _("That range holds more than %(limit)d slots; backfill it in parts.")
            % {"limit": MAX_BACKFILL}
        )
    if not slots:
        return 0, 0
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
