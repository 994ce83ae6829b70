"""State changes of schedules: the one code path for the admin, commands and the API.

Each function works inside the caller's transaction when there is one (or opens its own),
locks the rows it changes (waiting for a fire in flight to commit), and bumps
``aggregate_version`` so that concurrent editors can tell the row moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Now
from django.utils.translation import gettext as _

from .clock import database_now
from .conf import app_settings
from .enums import ScheduleState
from .models import Schedule
from .models.schedule import GRID_FIELDS


@dataclass(frozen=True)
class Outcome:
    """How many rows an action changed, and how many it left alone because of their state."""

    changed: int
    skipped: int


def _transition(
    schedules: QuerySet[Schedule], *, allowed: set[str], target: str, **extra: Any
) -> Outcome:
    with transaction.atomic(using=app_settings.DATABASE):
        locked = list(schedules.select_for_update().order_by("pk").values_list("pk", "state"))
        eligible = [pk for pk, state in locked if state in allowed]
        if eligible:
            Schedule.objects.filter(pk__in=eligible).update(
                state=target,
                active=target == ScheduleState.ACTIVE,
                aggregate_version=F("aggregate_version") + 1,
                updated_ts=Now(),
                **extra,
            )
    return Outcome(changed=len(eligible), skipped=len(locked) - len(eligible))


def pause(schedules: QuerySet[Schedule]) -> Outcome:
    """Stop active schedules from firing until resumed."""
    return _transition(schedules, allowed={ScheduleState.ACTIVE}, target=ScheduleState.PAUSED)


def resume(schedules: QuerySet[Schedule]) -> Outcome:
    """Let paused schedules fire again.

    A schedule whose next run passed while it was paused fires once, for the latest missed
    slot, then continues on its grid (the same rule as after downtime).
    """
    return _transition(schedules, allowed={ScheduleState.PAUSED}, target=ScheduleState.ACTIVE)


def cancel(schedules: QuerySet[Schedule]) -> Outcome:
    """End schedules for good: a cancelled schedule never fires again and cannot resume."""
    return _transition(
        schedules,
        allowed={ScheduleState.ACTIVE, ScheduleState.PAUSED},
        target=ScheduleState.CANCELLED,
    )


def save_schedule(schedule: Schedule, changed_fields: list[str] | None = None) -> Schedule:
    """Create ``schedule``, or write the ``changed_fields`` of an existing one.

    Validates first (nothing is written when invalid). An edit writes only the fields it
    changed, so it never overwrites the runtime state a fire wrote meanwhile; when a field
    that places the grid changed, the next run moves to the first slot of the new grid that
    is not in the past (database clock), instead of firing a backlog.
    """
    schedule.full_clean()
    with transaction.atomic(using=app_settings.DATABASE):
        if schedule._state.adding:
            schedule.save()
            return schedule
        current = Schedule.objects.select_for_update().get(pk=schedule.pk)
        if current.state == ScheduleState.CANCELLED:
            raise ValidationError(_("A cancelled schedule cannot be edited."), code="cancelled")
        fields = [f for f in (changed_fields or []) if f not in ("state", "active")]
        if not fields:
            return schedule
        if any(f in GRID_FIELDS for f in fields):
            schedule.place(database_now())
            fields += ["next_run_ts", "next_slot_ts", "state", "active"]
        schedule.aggregate_version = current.aggregate_version + 1
        schedule.updated_ts = Now()
        schedule.save(update_fields=[*fields, "aggregate_version", "updated_ts"])
        schedule.refresh_from_db(fields=["updated_ts"])
    return schedule
