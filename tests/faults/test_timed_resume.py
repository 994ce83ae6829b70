"""Timed resume (the leader's housekeeping, changes/pause_ends.resume_expired_pauses): pauses
the database refuses to end, pauses holding values at the edges of their types, and the
database gone in the middle of the resumes, never keep the others paused, and the leader
keeps its lease."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import FrequencyUnit, ScheduleState
from django_dsched.models import Event, Schedule
from tests.factories import ScheduleFactory
from tests.faults.harness import (
    LAST_TIMESTAMP,
    REFUSALS,
    drive,
    elections,
    leader,
    refusing_all,
    shown,
    terminated_at,
    write_by_hand,
)
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def timed_pauses(db_now, count: int, **fields) -> list[Schedule]:
    """Paused schedules whose pause ended a second ago (the leader resumes them)."""
    return ScheduleFactory.create_batch(
        count,
        paused=True,
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        start_ts=db_now() - timedelta(seconds=30),
        paused_until=db_now() - timedelta(seconds=1),
        **fields,
    )


def states(schedules) -> list[str]:
    rows = dict(
        Schedule.objects.filter(pk__in=[s.pk for s in schedules]).values_list("pk", "state")
    )
    return [rows[s.pk] for s in schedules]


def resumed(healthy) -> bool:
    return states(healthy) == [ScheduleState.ACTIVE] * len(healthy)


# The resume refused, the set-aside allowed (the rule is on the row becoming ACTIVE).
RESUME_REFUSED = "{r}.schedule_id = '%s' AND {r}.state = 'ACTIVE'"
# Every write of the row refused: it cannot be set aside either.
EVERY_WRITE_REFUSED = "{r}.schedule_id = '%s'"


def test_pauses_the_database_refuses_to_end(db_now, caplog):
    """A CHECK ... NOT VALID and a trigger RAISE refusing the resume (set aside with the
    database's error), and refusing every write (passed over for a while, logged)."""
    healthy = timed_pauses(db_now, 5)
    aside = {how: timed_pauses(db_now, 1, schedule_name=f"aside-{how}")[0] for how in REFUSALS}
    over = {how: timed_pauses(db_now, 1)[0] for how in REFUSALS}
    rules = [("schedule_t", RESUME_REFUSED % s.pk, how) for how, s in aside.items()]
    rules += [("schedule_t", EVERY_WRITE_REFUSED % s.pk, how) for how, s in over.items()]
    scheduler = leader("janitor")
    try:
        with refusing_all(rules):
            drive(scheduler, 0.2)  # leads
            before = elections()
            drive(scheduler, 10, until=lambda: resumed(healthy) and scheduler.stats.fired)
            # Heartbeats go on: the rows passed over are not tried again each time.
            drive(scheduler, 4 * scheduler.heartbeat_seconds)
    finally:
        scheduler.shutdown()
    assert resumed(healthy) and scheduler.stats.fired >= len(healthy)
    for how, schedule in aside.items():
        schedule.refresh_from_db()
        assert (schedule.state, schedule.active) == (ScheduleState.SET_ASIDE, False)
        expected = "CheckViolation (23514)" if how == "check" else "RaiseException (P0001)"
        assert schedule.set_aside_reason.startswith("could not resume at the end of its pause")
        assert expected in schedule.set_aside_reason
        assert expected in shown(schedule.schedule_name)
        audit = Event.objects.filter(aggregate_id=schedule.pk).order_by("aggregate_version")
        assert audit.last().event_type == "dsched.schedule.set_aside"
        assert audit.last().payload["error"] == schedule.set_aside_reason
    assert states(list(over.values())) == [ScheduleState.PAUSED] * 2
    assert sorted(scheduler.chores.passed_over.until) == sorted(str(s.pk) for s in over.values())
    assert (scheduler.stats.pauses_set_aside, scheduler.stats.pauses_passed_over) == (2, 2)
    assert "passed over" in caplog.text
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)


# Values no door lets in, written by hand; each on a paused row of its own.
EDGES = {
    "pause end=-infinity": {"paused_until": "'-infinity'"},
    "next=infinity": {"next_slot_ts": "'infinity'", "next_run_ts": "'infinity'"},
    "next=year 294276": {"next_slot_ts": LAST_TIMESTAMP},
    "start=-infinity": {"start_ts": "'-infinity'"},
    "every=max int": {"frequency_time": "2147483647"},
}


def test_pauses_at_the_edges_of_their_types(db_now, unchecked):
    """The database refuses these times now (the range CHECK): they are written as rows
    written before it hold them."""
    healthy = timed_pauses(db_now, 5)
    bad = []
    for what, columns in EDGES.items():
        [row] = timed_pauses(db_now, 1)
        with unchecked("schedule_t"):
            assert write_by_hand("schedule_t", "schedule_id", row.pk, **columns), what
        bad.append(row)
    scheduler = leader("janitor")
    try:
        drive(scheduler, 0.2)
        before = elections()
        drive(scheduler, 10, until=lambda: resumed(healthy) and scheduler.stats.fired)
        drive(scheduler, 2 * scheduler.heartbeat_seconds)
    finally:
        scheduler.shutdown()
    assert resumed(healthy)
    # Each bad row is set aside with its error (at once, or by the fire path once resumed),
    # or resumed and fired: never left paused and tried again forever.
    for row in bad:
        state, reason = sql(
            "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s", [row.pk]
        )[0]
        assert state in (ScheduleState.SET_ASIDE, ScheduleState.ACTIVE), state
        assert reason or state == ScheduleState.ACTIVE
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)


# The resumes' statements: the rows whose pause ended, locked; their write.
RESUMES = (r"FOR UPDATE SKIP LOCKED", r"^\s*WITH v AS \(SELECT")


def test_the_database_gone_in_the_middle_of_the_resumes(db_now):
    healthy = timed_pauses(db_now, 5)
    scheduler = leader("janitor")
    try:
        drive(scheduler, 0.2)
        before = elections()
        with terminated_at(*RESUMES) as met:
            drive(scheduler, 10, until=lambda: len(met) == len(RESUMES))
        drive(scheduler, 10, until=lambda: resumed(healthy))
    finally:
        scheduler.shutdown()
    assert sorted(met) == sorted(RESUMES)
    assert resumed(healthy)
    assert elections() - before <= len(RESUMES)
    # Each resumed once: one "resumed" audit event each.
    audits = Event.objects.filter(event_type="dsched.schedule.resumed")
    assert sorted(audits.values_list("aggregate_id", flat=True)) == sorted(s.pk for s in healthy)
