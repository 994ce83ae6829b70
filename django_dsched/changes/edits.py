"""Editing a schedule: what an edit does to when it fires (:func:`apply_edit`), whether
the editor may (:func:`check_edit`), and the save itself (:func:`save_schedule`).

An edit writes only the fields it changed, bumps ``aggregate_version`` and writes an
"edited" audit event with that version (:mod:`.audit`), in the caller's transaction when
there is one (else its own), with the schedule's row locked.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from django_dsched.changes import audit, creates, permissions
from django_dsched.changes.calendar_use import check_calendars
from django_dsched.changes.routes import check_routed
from django_dsched.conf import app_settings
from django_dsched.enums import PLANNED, ScheduleState
from django_dsched.exceptions import ConflictError, EditNotPermitted, ValidationError
from django_dsched.firing.plan import reason
from django_dsched.models import Schedule
from django_dsched.models.schedule import BOUND_FIELDS, GRID_FIELDS
from django_dsched.runtime.clock import database_now


@dataclass(frozen=True)
class EditEffect:
    """What an edit does to when a schedule fires (see :func:`apply_edit`)."""

    placed: bool  # the next slot was recomputed
    completes: bool  # no slot is left within its bounds: it completes now, like a cancel
    fires_now: bool  # its next run is at or before now: it fires at once, like run now
    dropped: datetime | None  # a due slot that will not fire (recorded as a misfire)
    cause: str  # the changed field that brought this about, for error messages


def apply_edit(
    current: Schedule, schedule: Schedule, fields: list[str], now: datetime, *, revive: bool = False
) -> EditEffect:
    """Move ``schedule``'s next run for an edit of ``fields`` from the stored ``current``.

    A change of a field that places slots puts the next run on the first slot of the new
    timetable that runs at or after ``now`` (no backlog); a change of a bound keeps the next
    slot and completes the schedule if it is no longer within its bounds. A paused schedule
    stays paused. ``schedule``'s runtime columns must already be ``current``'s.
    """
    timing = [name for name in fields if name in GRID_FIELDS]
    bounds = [name for name in fields if name in BOUND_FIELDS]
    if not (timing or bounds or revive) or schedule.state not in PLANNED:
        return EditEffect(False, False, False, None, "")
    state = schedule.state
    if timing or revive:  # a set-aside schedule comes back from now
        _place(schedule, now)
    else:
        schedule.rebound()
    if state == ScheduleState.PAUSED and schedule.state == ScheduleState.ACTIVE:
        schedule.state, schedule.active = state, False
    completes = schedule.state == ScheduleState.COMPLETED
    due = state == ScheduleState.ACTIVE and current.next_run_ts <= now
    moved = completes or schedule.next_slot_ts != current.next_slot_ts
    return EditEffect(
        placed=True,
        completes=completes,
        fires_now=(
            bool(timing or revive)
            and schedule.state == ScheduleState.ACTIVE
            and schedule.next_run_ts <= now
        ),
        dropped=current.next_slot_ts if due and moved else None,
        # A bound is the likelier cause of an end, the timing of a fire.
        cause=((bounds or timing or ["state"]) if completes else (timing or bounds or ["state"]))[
            0
        ],
    )


class EditNeeds(EditNotPermitted):
    """An :class:`EditNotPermitted` naming the capability the edit needs: :data:`.CANCEL`
    for one that ends the schedule now, :data:`.FIRE` for one that fires it at once. (The
    REST API names its permission in a 403.)"""

    def __init__(
        self, message: dict[str, str], *, code: str, capability: permissions.Capability
    ) -> None:
        super().__init__(message, code=code)
        self.capability = capability


def _check_permitted(effect: EditEffect, *, may_complete: bool, may_fire: bool) -> None:
    """The one decision of what an edit needs: refuse (:class:`EditNeeds`) an edit that
    ends the schedule now without ``may_complete``, or fires it at once without
    ``may_fire``."""
    if effect.completes and not may_complete:
        raise EditNeeds(
            {
                effect.cause: _(
                    "This change leaves the schedule no slot to fire within its bounds, so it "
                    "would end it now; that needs the permission to cancel schedules."
                )
            },
            code="needs_cancel_permission",
            capability=permissions.CANCEL,
        )
    if effect.fires_now and not may_fire:
        raise EditNeeds(
            {
                effect.cause: _(
                    "This change makes the schedule due now, so it would fire at once; that "
                    "needs the permission to run schedules now. Choose a time in the future."
                )
            },
            code="needs_trigger_permission",
            capability=permissions.FIRE,
        )


def check_edit(
    schedule: Schedule, changed_fields: list[str], *, may_complete: bool, may_fire: bool
) -> EditEffect:
    """What saving ``schedule`` (edited in ``changed_fields``) would do, without saving; raise
    :class:`EditNotPermitted` if it would end or fire the schedule at once and the caller
    may not, :class:`ValidationError` if its new topic is not granted to its host
    (:mod:`.routes`). ``schedule`` itself is not changed. Locks the row inside a
    transaction."""
    rows = Schedule.objects.filter(pk=schedule.pk)
    if transaction.get_connection(app_settings.DATABASE).in_atomic_block:
        rows = rows.select_for_update()
    current = rows.first()
    if current is None:
        return EditEffect(False, False, False, None, "")
    candidate = copy.copy(schedule)
    for name in RUNTIME_FIELDS:
        setattr(candidate, name, getattr(current, name))
    fields = [name for name in changed_fields if getattr(current, name) != getattr(schedule, name)]
    if "event_topic" in fields:
        check_routed(candidate)
    check_calendars(candidate)  # the host's own or the operator's, and they exist
    effect = apply_edit(current, candidate, fields, database_now())
    _check_permitted(effect, may_complete=may_complete, may_fire=may_fire)
    return effect


def save_schedule(
    schedule: Schedule,
    changed_fields: list[str] | None = None,
    *,
    actor: Any = None,
    expected_version: int | None = None,
    may_complete: bool | None = None,
    may_fire: bool | None = None,
) -> Schedule:
    """Create ``schedule``, or write the ``changed_fields`` of an existing one.

    Validates first (nothing is written when invalid). An edit writes only the fields it
    changed, so it never overwrites what a fire wrote meanwhile; when a field that places
    the slots changed, the next run moves to the first slot of the new timetable that runs
    at or after now (database clock), instead of firing a backlog; a due slot skipped that
    way counts as a misfire, and the audit event names it. With ``expected_version`` (the
    ``aggregate_version`` the editor read) an edit of a schedule that changed since is
    refused with :class:`ConflictError`.

    An edit that would end the schedule now (no slot left within its bounds) is a cancel,
    and one that makes it due now is a run now: with ``may_complete`` / ``may_fire`` False
    it is refused with :class:`EditNeeds` (an :class:`EditNotPermitted`), naming the field
    and the capability. Left None they are the
    ``actor``'s permissions to cancel and to run now when it is a user (code is trusted),
    as at every door (:mod:`.permissions`); a new schedule that fires a backlog needs the
    latter too (:class:`.NotPermitted`).
    """
    if may_complete is None:
        may_complete = permissions.may(actor, permissions.CANCEL)
    if may_fire is None:
        may_fire = permissions.may(actor, permissions.FIRE)
    if schedule._state.adding:
        # Validated in Python, one INSERT with its "created" event (changes.creates);
        # with an idempotency key that exists, the existing schedule.
        # (``may_fire``: a new schedule that would fire a backlog at once is a run now.)
        return creates.create_instance(schedule, actor=actor, may_fire=may_fire)[0]
    check_calendars(schedule)  # resolved to ids, and usable by the host, before validation
    schedule.full_clean()
    with transaction.atomic(using=app_settings.DATABASE):
        current = Schedule.objects.select_for_update().get(pk=schedule.pk)
        _check_editable(current, expected_version)
        fields = [f for f in (changed_fields or []) if f not in ("state", "active")]
        changes = {
            name: [audit.plain(getattr(current, name)), audit.plain(getattr(schedule, name))]
            for name in fields
            if getattr(current, name) != getattr(schedule, name)
        }
        if not changes:
            return schedule
        if "event_topic" in changes:
            check_routed(schedule)
        _write_edit(
            current, schedule, changes, actor=actor, may_complete=may_complete, may_fire=may_fire
        )
    return schedule


def _check_editable(current: Schedule, expected_version: int | None) -> None:
    """Refuse an edit of ``current`` (the locked row) if it changed since the editor read
    it (``expected_version``), or is cancelled."""
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


def _write_edit(
    current: Schedule,
    schedule: Schedule,
    changes: dict[str, list[Any]],
    *,
    actor: Any,
    may_complete: bool,
    may_fire: bool,
) -> None:
    """Write the fields of ``schedule`` named in ``changes`` (each ``[before, after]``) over
    ``current``, the locked row, with what the edit does to its next run, and the "edited"
    audit event."""
    now = database_now()
    fields = list(changes)
    # Runtime state is the database's, not the (possibly stale) instance's.
    for name in RUNTIME_FIELDS:
        setattr(schedule, name, getattr(current, name))
    revived = schedule.state == ScheduleState.SET_ASIDE
    if revived:
        # The saved definition passed validation: back into the poll, from now.
        schedule.state = ScheduleState.ACTIVE
        schedule.set_aside_reason, schedule.set_aside_ts = "", None
        changes["state"] = [ScheduleState.SET_ASIDE.value, ScheduleState.ACTIVE.value]
        fields += ["set_aside_reason", "set_aside_ts"]
    effect = apply_edit(current, schedule, fields, now, revive=revived)
    _check_permitted(effect, may_complete=may_complete, may_fire=may_fire)
    details: dict[str, Any] = {}
    if effect.placed:
        fields += ["next_run_ts", "next_slot_ts", "state", "active"]
        if schedule.state != current.state:
            changes["state"] = [current.state, schedule.state]
    if current.held_by is not None and (effect.placed or "overlap_policy" in changes):
        schedule.held_by = None  # the held slot moved, or the policy that held it changed
        fields.append("held_by")
    if effect.dropped is not None:
        schedule.misfire_count = current.misfire_count + 1
        fields.append("misfire_count")
        details["misfired"] = {
            "slot": audit.plain(effect.dropped),
            "reason": "due when the timing changed; the new timetable goes on from now",
        }
    schedule.aggregate_version = current.aggregate_version + 1
    schedule.updated_ts = now
    schedule.save(update_fields=[*dict.fromkeys(fields), "aggregate_version", "updated_ts"])
    audit.event_for(schedule, "edited", actor=actor, at=now, changes=changes, **details).save()


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


# Columns the fire path writes: an edit takes them from the locked row.
RUNTIME_FIELDS = (
    "next_run_ts",
    "next_slot_ts",
    "state",
    "active",
    "fire_count",
    "misfire_count",
    # The overlap policies' (models/overlap.py).
    "held_by",
    "skip_count",
    "buffer_count",
)
