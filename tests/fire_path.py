"""Drive the fire path's own decisions (``firing.plan``) through simulated time.

``plan()`` is what the leader runs on each claimed row; the SQL around it only writes what
it decided. Feeding it the row the claim would return, at the moment the poll would see the
schedule due, shows exactly what the fire path fires and when, for hundreds of slots,
without waiting for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from django_dsched.enums import ScheduleState
from django_dsched.firing.batch import BatchResult, fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.firing.plan import plan
from django_dsched.models import Schedule
from django_dsched.timetables.grid import from_microseconds, to_microseconds


def claim_row(
    schedule: Schedule, next_slot: datetime, now: datetime, fire_count: int
) -> tuple[Any, ...]:
    """The row ``firing.claim.CLAIM`` returns for ``schedule`` (times as epoch microseconds)."""
    end = schedule.end_ts
    return (
        str(schedule.schedule_id),
        schedule.schedule_kind,
        schedule.frequency_unit,
        schedule.frequency_time,
        to_microseconds(schedule.start_ts),
        to_microseconds(next_slot),
        to_microseconds(now),
        schedule.cron_expression,
        schedule.time_zone,
        schedule.misfire_policy,
        schedule.misfire_grace_seconds,
        schedule.catch_up_limit,
        None if end is None else to_microseconds(end),
        schedule.max_fires,
        fire_count,
        schedule.jitter_seconds,
        schedule.rrule,
        [str(calendar) for calendar in schedule.calendar_ids] if schedule.calendar_ids else None,
        schedule.calendar_policy,
        None,  # the last fire or change (calendar-filtered rows only)
        None,  # the overlap column: ALLOW_ALL (firing/claim.py, OVERLAP)
    )


@dataclass
class Run:
    fired_slots: list[datetime] = field(default_factory=list)
    fired_at: list[datetime] = field(default_factory=list)  # when each was due (next run)
    missed: int = 0
    completed: bool = False


def run_fire_path(schedule: Schedule, polls: int, lag: timedelta = timedelta(0)) -> Run:
    """Poll ``schedule`` ``polls`` times, each ``lag`` after its next run, as the leader
    would, and apply what ``plan()`` decides each time."""
    run = Run()
    next_slot, next_run, fires = schedule.next_slot_ts, schedule.next_run_ts, schedule.fire_count
    for _ in range(polls):
        decided = plan([claim_row(schedule, next_slot, next_run + lag, fires)])
        slot = decided.slots[0]
        if slot is not None:
            run.fired_slots.append(from_microseconds(slot))
            run.fired_at.append(next_run)
            fires += 1
        run.missed += decided.missed[0]
        if decided.states[0] == ScheduleState.COMPLETED or (
            schedule.max_fires is not None and fires >= schedule.max_fires
        ):
            run.completed = True
            break
        next_slot = from_microseconds(decided.next_slots[0])
        next_run = from_microseconds(decided.next_runs[0])
    return run


def fire(fence: Fence, batch_size: int = 500) -> BatchResult:
    """One batch of the real fire path, committed (rolled back when fenced)."""
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(cursor, fence, batch_size)
        if result.fenced:
            transaction.set_rollback(True)
    return result
