"""Planning a claimed batch: each row's fire slot, next slot, next run and state.

Python computes them with :mod:`django_dsched.timetables`, the same code the admin and the
API use, within a time budget. A row that cannot be planned is set aside with its error
(:func:`reason`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_dsched.enums import MisfirePolicy, ScheduleKind, ScheduleState
from django_dsched.exceptions import ScheduleDataError
from django_dsched.firing import calendared
from django_dsched.firing.claim import UNREADABLE
from django_dsched.firing.overlap import (
    BUFFERED,
    RUN_CANCELLED,
    Outcome,
    Step,
    decide_overlap,
    previous,
)
from django_dsched.models.times import OUT_OF_RANGE
from django_dsched.timetables import (
    Decision,
    Rules,
    Timetable,
    backlog_window,
    decide,
    timetable_for,
)
from django_dsched.timetables.calendars import Calendar
from django_dsched.timetables.grid import (
    MICROSECOND,
    due_slot_us,
    from_microseconds,
    to_microseconds,
)

# Longest error text kept on a set-aside schedule.
REASON_MAX = 2000


def unreadable(start: int | None, next_slot: int | None, end: int | None) -> str:
    """Why a claimed row whose times the claim could not read is set aside (the claim
    returns :data:`~.claim.UNREADABLE` for a time outside the years 1 to 9999)."""
    columns = [
        name
        for name, value in (("start_ts", start), ("next_slot_ts", next_slot), ("end_ts", end))
        if value == UNREADABLE or (value is None and name != "end_ts")
    ]
    return (
        f"{ScheduleDataError.__name__}: {' and '.join(columns)} "
        f"{'holds a time' if len(columns) == 1 else 'hold times'} {OUT_OF_RANGE} (infinite, "
        "or too far in the past or the future to compute with); the database refuses such a "
        "time now (dsched_schedule_times_in_range): save the schedule with one in that range"
    )


@dataclass(slots=True)
class Plan:
    """Per claimed row: the slot to fire (or None), the next slot and run, the new state."""

    ids: list[str] = field(default_factory=list)
    slots: list[int | None] = field(default_factory=list)
    next_slots: list[int] = field(default_factory=list)
    next_runs: list[int] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    missed: list[bool] = field(default_factory=list)
    # Rows that could not be planned: (schedule id, error), to be set aside.
    aside: list[tuple[str, str]] = field(default_factory=list)
    # Rows not planned because the budget ran out (left as they are).
    deferred: int = 0
    # Planned rows whose next run is already due (and their ids).
    again: int = 0
    again_ids: list[str] = field(default_factory=list)
    # What the overlap policies write (firing/overlap.py), and how many slots they skipped
    # and held.
    steps: list[Step] = field(default_factory=list)
    skipped: int = 0
    buffered: int = 0
    cancelled: int = 0
    # CANCEL_OTHER's fires that need their previous run withdrawn first: (schedule id, run,
    # the slot held if it cannot be, microseconds).
    cancels: list[tuple[str, str, int]] = field(default_factory=list)
    # What calendars did to the slots of calendar-filtered rows (audit and metrics).
    fates: calendared.Fates = field(default_factory=calendared.Fates)

    def add(
        self,
        schedule_id: str,
        slot: int | None,
        next_slot: int | None,
        next_run: int | None,
        missed: bool,
    ) -> None:
        self.ids.append(schedule_id)
        self.slots.append(slot)
        if next_slot is None or next_run is None:
            # Nothing comes after: the schedule completes (its next run stays put).
            last = slot if slot is not None else 0
            self.next_slots.append(last)
            self.next_runs.append(last)
            self.states.append(COMPLETED)
        else:
            self.next_slots.append(next_slot)
            self.next_runs.append(next_run)
            self.states.append(ACTIVE)
        self.missed.append(missed)

    def hold_instead(self, runs: dict[str, str]) -> None:
        """The fires of ``runs`` (schedule id -> run) whose previous run could not be
        withdrawn (a relay claimed it meanwhile): not written; their slot is held for it."""
        keep = [i for i, schedule_id in enumerate(self.ids) if schedule_id not in runs]
        for name in ("ids", "slots", "next_slots", "next_runs", "states", "missed"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in keep])
        self.again_ids = [i for i in self.again_ids if i not in runs]
        self.again = len(self.again_ids)
        self.steps = [step for step in self.steps if step.schedule_id not in runs]
        for schedule_id, run, slot in self.cancels:
            if schedule_id in runs:
                self.steps.append(
                    Step(schedule_id, BUFFERED, run, buffered=True, slot=slot, run=run)
                )
        self.cancelled -= len(runs)
        self.buffered += len(runs)


ACTIVE, COMPLETED = ScheduleState.ACTIVE.value, ScheduleState.COMPLETED.value
INTERVAL, COALESCE = ScheduleKind.INTERVAL.value, MisfirePolicy.COALESCE.value
CRON = ScheduleKind.CRON.value


def plan(
    rows: list[tuple[Any, ...]],
    deadline: float | None = None,
    calendars: Mapping[str, Calendar] | None = None,
) -> Plan:
    """Decide, for each claimed row, what to fire and when it runs next (microseconds).

    Rows on the integer fast path are always planned (they cost a microsecond or two).
    The others are planned until the monotonic clock passes ``deadline``; the rest are
    left out of the plan (``deferred``): unchanged, they are released at commit and taken
    by the next batch, so a slow batch shrinks instead of outliving the lease. A row whose
    planning raises is set aside with its error; the others are planned as usual.
    ``calendars``: those the rows name, by id (:func:`.calendared.batch_calendars`).
    """
    result = Plan()
    shared = calendared.Shared(calendars or {})
    slow: list[tuple[Any, ...]] = []
    # One backlog window for the whole batch, on both paths (timetables.misfire).
    window = backlog_window()
    window_us = window // MICROSECOND
    for row in rows:
        (schedule_id, kind, unit, every, start, next_slot, now, _cron, _zone, policy, grace,
         _limit, end, max_fires, _fires, jitter_s, _rrule, calendar_ids, _shift,
         _last_change, overlap) = row  # fmt: skip
        if start is None or next_slot is None or UNREADABLE in (start, next_slot, end):
            result.aside.append((schedule_id, unreadable(start, next_slot, end)))
            continue
        if (
            kind == INTERVAL
            and policy == COALESCE
            and grace is None
            and end is None
            and max_fires is None
            and not jitter_s
            and calendar_ids is None
            and overlap is None
        ):
            # The common case: plain integer arithmetic on the grid where it is exact.
            # COALESCE without jitter or grace is the grid's latest slot one backlog window
            # ago (or the next slot when it came due since), as misfire.decide computes it.
            try:
                slot, following = due_slot_us(unit, every, start, next_slot, now - window_us, _zone)
            except Exception as exc:  # any error here is this row's alone
                result.aside.append((schedule_id, reason(exc)))
                continue
            result.add(schedule_id, slot, following, following, slot > next_slot)
            if following is not None and following <= now:
                result.again += 1
                result.again_ids.append(schedule_id)
            continue
        slow.append(row)
    for index, row in enumerate(slow):
        if index and deadline is not None and time.monotonic() > deadline:
            result.deferred = len(slow) - index
            break
        try:
            _plan_one(result, row, window, shared)
        except Exception as exc:  # any error here is this row's alone
            result.aside.append((row[0], reason(exc)))
    return result


def _plan_one(
    result: Plan,
    row: tuple[Any, ...],
    window: timedelta | None = None,
    shared: calendared.Shared | None = None,
) -> None:
    """Plan one row through the timetables (every kind, policy and bound).

    ``max_fires`` completes a schedule in ``WRITE``, which knows whether a fire was a new
    slot; here a schedule that already reached it completes without firing. ``window``:
    the batch's backlog window (default: read from the settings). A row filtered by
    calendars goes on from its current timetable's slot (:mod:`.calendared`), and what the
    calendars did to its slots is noted in ``result.fates``. ``shared``: the batch's
    calendars and the filtered timetables its rows share (:class:`.calendared.Shared`).
    """
    (schedule_id, kind, unit, every, start, next_slot, now, cron, zone, policy, grace,
     limit, end, max_fires, fires, jitter_s, rrule, calendar_ids, shift,
     _last_change, overlap) = row  # fmt: skip
    if max_fires is not None and fires >= max_fires:
        result.add(schedule_id, None, None, None, False)
        if overlap is not None and overlap[1] is not None:  # completes: nothing held now
            result.steps.append(Step(schedule_id, None, None))
        return
    table = timetable_for(
        kind,
        start=from_microseconds(start),
        unit=unit,
        every=every,
        cron=cron,
        time_zone=zone,
        rrule=rrule,
    )
    rules = Rules(
        policy=policy,
        grace_seconds=grace,
        catch_up_limit=limit,
        end=None if end is None else from_microseconds(end),
        jitter_seconds=jitter_s,
        jitter_key=schedule_id,
    )
    slot_from, stale, inner = from_microseconds(next_slot), None, table
    if calendar_ids is not None:
        built_of = (kind, unit, every, None if kind == CRON else start, cron, zone, rrule)
        shared = shared or calendared.Shared({})
        table = shared.filtered(built_of, table, calendar_ids, shift, zone)
        going_on, stale = _calendar_start(result, row, table, rules, inner)
        if going_on is None:
            return
        slot_from = going_on
    now_at = from_microseconds(now)
    decision: Decision | None
    if overlap is not None:
        outcome = decide_overlap(table, rules, previous(overlap), slot_from, now_at, fires, window)
        _refuse_frozen(table, inner, outcome.decision, slot_from, rules)
        _overlap(result, schedule_id, table, rules, outcome, now)
        if outcome.cancel and outcome.run is not None:
            result.cancels.append((schedule_id, outcome.run, to_microseconds(slot_from)))
        decision = outcome.decision
    else:
        decision = decide(table, rules, slot_from, now_at, fires, window)
        _refuse_frozen(table, inner, decision, slot_from, rules)
        _add(result, schedule_id, table, rules, decision, now)
    if calendar_ids is not None and decision is not None:
        passed = min(slot_from, from_microseconds(next_slot))
        result.fates.note(schedule_id, table, passed, decision.next_slot, decision.slot, stale)


def _refuse_frozen(
    table: Timetable, inner: Timetable, decision: Decision | None, slot: datetime, rules: Rules
) -> None:
    """A calendar-filtered row with nothing after this plan while its rule goes on is set
    aside, not completed (:func:`.calendared.refuse_frozen`)."""
    if table is inner or decision is None or decision.next_slot is not None:
        return
    calendared.refuse_frozen(table, inner, decision.slot or slot, rules.end)


def _add(
    result: Plan, schedule_id: str, table: Timetable, rules: Rules, decision: Decision, now: int
) -> None:
    """Plan ``decision`` for the batch's WRITE (``now``: the claim's, microseconds)."""
    after = decision.next_slot
    next_run = None if after is None else to_microseconds(rules.run_time(table, after))
    result.add(
        schedule_id,
        None if decision.slot is None else to_microseconds(decision.slot),
        None if after is None else to_microseconds(after),
        next_run,
        decision.missed,
    )
    if next_run is not None and next_run <= now:
        result.again += 1
        result.again_ids.append(schedule_id)


def _calendar_start(
    result: Plan, row: tuple[Any, ...], table: Timetable, rules: Rules, inner: Timetable
) -> tuple[datetime | None, datetime | None]:
    """Where a calendar-filtered row goes on from (:func:`.calendared.go_on_from`), and its
    stored slot if that no longer is one. A row with nothing due (its slot moved later by a
    calendar edit, or none left) is planned here, firing nothing: ``(None, None)``."""
    schedule_id, start, next_slot, now, last_change = row[0], row[4], row[5], row[6], row[19]
    stored = from_microseconds(next_slot)
    changed = None if last_change is None else from_microseconds(last_change)
    current, stale = calendared.go_on_from(table, from_microseconds(start), stored, changed)
    if current is None:
        calendared.refuse_frozen(table, inner, stored - MICROSECOND, rules.end)
    if current is not None and rules.end is not None and current > rules.end:
        current = None
    dropped = stored if stale else None
    if current is not None and rules.run_time(table, current) <= from_microseconds(now):
        return current, dropped
    run = None if current is None else to_microseconds(rules.run_time(table, current))
    result.add(schedule_id, None, None if current is None else to_microseconds(current), run, False)
    result.fates.note(schedule_id, table, stored, current, None, dropped)
    return None, None


def _overlap(
    result: Plan, schedule_id: str, table: Timetable, rules: Rules, outcome: Outcome, now: int
) -> None:
    """Plan what an overlap policy decided (firing/overlap.py): a fire for WRITE, a step for
    OVERLAP, or both."""
    if outcome.decision is not None:
        _add(result, schedule_id, table, rules, outcome.decision, now)
    if not outcome.step:
        return
    step = Step(
        schedule_id,
        outcome.verb,
        outcome.held,
        skipped=outcome.skipped,
        buffered=outcome.buffered,
        slot=None if outcome.slot is None else to_microseconds(outcome.slot),
        run=outcome.run,
    )
    skip = outcome.advance
    if skip is not None:  # moves on past the skipped slot, as WRITE would after a fire
        after = skip.next_slot
        assert skip.slot is not None
        last = to_microseconds(skip.slot)
        next_run = last if after is None else to_microseconds(rules.run_time(table, after))
        step = dataclasses.replace(
            step,
            advance=True,
            next_slot=last if after is None else to_microseconds(after),
            next_run=next_run,
            state=COMPLETED if after is None else ACTIVE,
            missed=skip.missed,
        )
        if after is not None and next_run <= now:
            result.again += 1
            result.again_ids.append(schedule_id)
    result.steps.append(step)
    result.skipped += outcome.skipped
    result.buffered += outcome.buffered
    result.cancelled += outcome.verb == RUN_CANCELLED


def reason(exc: BaseException) -> str:
    """An error as kept on a set-aside schedule: its type and message, bounded."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text[:REASON_MAX]
