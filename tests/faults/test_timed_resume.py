"""Timed resume (the leader's housekeeping, changes/pauses.resume_expired_pauses): one pause
the database refuses to end, or one holding values at the edges of its types, never keeps
the others paused, and the leader keeps its lease."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import FrequencyUnit, ScheduleState
from django_dsched.models import Event, Schedule
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.faults.harness import REFUSALS, drive, elections, refusing, write_by_hand
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


def leading(name: str = "janitor") -> Scheduler:
    scheduler = Scheduler(instance_id=name)
    scheduler._retention_wanted = False  # the history thread is not what these look at
    return scheduler


# The resume refused, the set-aside allowed (the rule is on the row becoming ACTIVE).
RESUME_REFUSED = "{r}.schedule_name = 'poison' AND {r}.state = 'ACTIVE'"
# Every write of the row refused: it cannot be set aside either.
EVERY_WRITE_REFUSED = "{r}.schedule_name = 'poison'"


@pytest.mark.parametrize("how", REFUSALS)
def test_a_pause_the_database_refuses_to_end_is_set_aside_and_the_others_resume(db_now, how):
    healthy = timed_pauses(db_now, 5)
    [bad] = timed_pauses(db_now, 1, schedule_name="poison")
    scheduler = leading()
    try:
        with refusing("schedule_t", RESUME_REFUSED, how):
            drive(scheduler, 0.2)  # leads
            before = elections()
            drive(
                scheduler,
                10,
                until=lambda: states([*healthy, bad]).count(ScheduleState.PAUSED) == 0,
            )
            drive(scheduler, 3 * scheduler.heartbeat_seconds)
    finally:
        scheduler.shutdown()
    assert states(healthy) == [ScheduleState.ACTIVE] * 5
    bad.refresh_from_db()
    assert (bad.state, bad.active) == (ScheduleState.SET_ASIDE, False)
    assert "could not resume" in bad.set_aside_reason
    expected = "CheckViolation (23514)" if how == "check" else "RaiseException (P0001)"
    assert expected in bad.set_aside_reason
    audit = Event.objects.filter(aggregate_id=bad.pk).order_by("aggregate_version").last()
    assert audit is not None and audit.event_type == "dsched.schedule.set_aside"
    assert audit.payload["error"] == bad.set_aside_reason
    # The healthy ones fire again; the leader kept its session and its lease throughout.
    assert Event.objects.filter(
        aggregate_id__in=[s.pk for s in healthy], scheduled_ts__isnull=False
    ).exists()
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)


@pytest.mark.parametrize("how", REFUSALS)
def test_a_pause_the_database_will_not_even_set_aside_is_passed_over(db_now, how, caplog):
    healthy = timed_pauses(db_now, 5)
    [bad] = timed_pauses(db_now, 1, schedule_name="poison")
    scheduler = leading()
    try:
        with refusing("schedule_t", EVERY_WRITE_REFUSED, how):
            drive(scheduler, 0.2)
            before = elections()
            drive(scheduler, 10, until=lambda: states(healthy) == [ScheduleState.ACTIVE] * 5)
            # Heartbeats go on: the row is passed over, not tried again each time.
            drive(scheduler, 4 * scheduler.heartbeat_seconds)
    finally:
        scheduler.shutdown()
    bad.refresh_from_db()
    assert (bad.state, bad.paused_until is not None) == (ScheduleState.PAUSED, True)
    assert list(scheduler.chores.passed_over.until) == [str(bad.pk)]
    assert scheduler.stats.pauses_passed_over == 1
    assert "passed over" in caplog.text and str(bad.pk) in caplog.text
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)


@pytest.mark.parametrize(
    "columns",
    [
        {"paused_until": "'-infinity'"},
        {"next_slot_ts": "'infinity'", "next_run_ts": "'infinity'"},
        {"next_slot_ts": "'294276-12-31 23:59:59+00'"},
        {"frequency_time": "2147483647"},
        {"start_ts": "'-infinity'"},
    ],
    ids=[
        "paused_until=-infinity",
        "next=infinity",
        "next=year 294276",
        "every=max int",
        "start=-infinity",
    ],
)
def test_a_pause_with_values_at_the_edges_never_keeps_the_others_paused(db_now, columns):
    healthy = timed_pauses(db_now, 5)
    [bad] = timed_pauses(db_now, 1)
    write_by_hand("schedule_t", "schedule_id", bad.pk, **columns)
    scheduler = leading()
    try:
        drive(scheduler, 0.2)
        before = elections()
        drive(scheduler, 10, until=lambda: states(healthy) == [ScheduleState.ACTIVE] * 5)
        drive(scheduler, 3 * scheduler.heartbeat_seconds)
    finally:
        scheduler.shutdown()
    assert states(healthy) == [ScheduleState.ACTIVE] * 5
    # The bad row is resumed and then set aside by the fire path, or set aside at once:
    # either way with its error, never left paused and tried again forever.
    (state, reason) = sql(
        "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s", [bad.pk]
    )[0]
    assert state in (ScheduleState.SET_ASIDE, ScheduleState.ACTIVE), state
    if state == ScheduleState.SET_ASIDE:
        assert reason
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)
