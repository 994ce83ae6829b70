"""A slot the product does not fire on purpose is not a miss: no overlap policy, calendar,
catch-up window, pause or fire limit makes a schedule LATE. A held slot becomes LATE only
when the hold outlives what its policy permits (the run it waits for stopped going and
nothing fired the slot), and a held run that overruns its maximum is STUCK.

Driven through the real fire path (the scheduler's claim decides), a round at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import FrequencyUnit, Health, OverlapPolicy, ScheduleState
from django_dsched.health.slots import Outcome, recent_slots
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.timetables import Blackout
from tests.factories import ScheduleFactory
from tests.health.test_judge import db_now, every_reader_agrees, fire, health_of
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def minutely(policy: str = OverlapPolicy.ALLOW_ALL, **fields) -> Schedule:
    """A minutely schedule started 10 minutes ago, fired once (its latest slot): its run
    (pending, no relay) still goes."""
    schedule = ScheduleFactory(
        start_ts=db_now() - timedelta(minutes=10),
        frequency_unit=FrequencyUnit.MINUTES,
        overlap_policy=policy,
        **fields,
    )
    assert fire() >= 1
    return Schedule.objects.get(pk=schedule.pk)


def overdue(schedule: Schedule, minutes: int = 5) -> None:
    """Its next slot came due ``minutes`` ago (past its 60 s grace): a slot of its timetable
    (minutely), as if the scheduler had been away while its run went."""
    sql(
        "UPDATE schedule_t SET next_slot_ts = next_slot_ts - make_interval(mins => %s),"
        " next_run_ts = next_run_ts - make_interval(mins => %s) WHERE schedule_id = %s",
        [minutes, minutes, schedule.pk],
    )


def run_of(schedule: Schedule) -> OutboxMessage:
    return OutboxMessage.objects.filter(aggregate_id=schedule.pk).latest("aggregate_version")


def test_a_slot_held_by_a_buffer_policy_is_not_late_until_the_hold_outlives_its_run():
    schedule = minutely(OverlapPolicy.BUFFER_ONE)
    overdue(schedule)
    fire()  # the claim holds the slot: the run still goes
    schedule.refresh_from_db()
    assert schedule.held_by == run_of(schedule).pk
    verdict = health_of(schedule)
    assert verdict.state == Health.OK
    assert "waits for run" in verdict.reason and "BUFFER_ONE" in verdict.reason
    every_reader_agrees(schedule)
    # The timeline: the held slot is due (waiting), not missed.
    outcomes = {s.slot: s.outcome for s in recent_slots(schedule, db_now(), count=15)}
    assert outcomes[schedule.next_slot_ts] == Outcome.DUE

    # The run's relay died: its claim expired (the visibility timeout). The hold is over,
    # nothing fired the slot: LATE.
    sql(
        "UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1 second',"
        " attempts = 1 WHERE id = %s",
        [schedule.held_by],
    )
    assert health_of(schedule).state == Health.LATE
    every_reader_agrees(schedule)
    fire()  # the scheduler releases the held slot: it fires
    assert health_of(schedule).state == Health.OK


def test_a_held_run_past_its_maximum_runtime_is_stuck_not_late():
    schedule = minutely(OverlapPolicy.BUFFER_ONE, max_runtime_seconds=60)
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = clock_timestamp(),"
        " started_ts = clock_timestamp() - interval '10 minutes' WHERE aggregate_id = %s",
        [schedule.pk],
    )
    overdue(schedule)
    fire()
    schedule.refresh_from_db()
    assert schedule.held_by is not None
    assert health_of(schedule).state == Health.STUCK
    every_reader_agrees(schedule)


@pytest.mark.parametrize("policy", [OverlapPolicy.BUFFER_ALL, OverlapPolicy.CANCEL_OTHER])
def test_every_holding_policy_is_not_late_while_its_run_goes(policy):
    schedule = minutely(policy)
    # The run started (a relay took it: CANCEL_OTHER cannot withdraw it any more).
    sql(
        "UPDATE outbox_message_t SET attempts = 1,"
        " claimed_until = clock_timestamp() + interval '5 minutes' WHERE aggregate_id = %s",
        [schedule.pk],
    )
    overdue(schedule)
    schedule.refresh_from_db()
    if schedule.held_by is None:
        # No scheduler came to the slot within its grace (it would have held it): nothing
        # is firing the row, whatever its policy would do. LATE.
        assert health_of(schedule).state == Health.LATE
    fire()
    schedule.refresh_from_db()
    assert schedule.held_by is not None
    assert health_of(schedule).state == Health.OK
    every_reader_agrees(schedule)


def test_cancel_other_with_a_run_it_would_withdraw_is_late_when_nothing_fires():
    """A queued run CANCEL_OTHER withdraws holds nothing: a due slot past its grace that
    the scheduler did not fire is LATE."""
    schedule = minutely(OverlapPolicy.CANCEL_OTHER)
    overdue(schedule)
    assert health_of(schedule).state == Health.LATE
    fire()  # withdraws the queued run, fires the slot
    assert health_of(schedule).state == Health.OK


def test_skipped_slots_are_skipped_on_the_timeline_and_not_late():
    schedule = minutely(OverlapPolicy.SKIP)
    overdue(schedule, minutes=3)
    fire()  # the run goes: the slot is skipped, the schedule goes on
    schedule.refresh_from_db()
    assert schedule.skip_count >= 1 and schedule.held_by is None
    assert health_of(schedule).state == Health.OK
    outcomes = {s.slot: s.outcome for s in recent_slots(schedule, db_now(), count=10)}
    skipped = [slot for slot, outcome in outcomes.items() if outcome == Outcome.SKIPPED]
    assert skipped and Outcome.MISSED not in outcomes.values()


def test_calendar_excluded_slots_catch_up_drops_pauses_and_the_fire_limit_are_not_late():
    now = db_now()
    freeze = api.create_calendar(
        "freeze",
        weekend=(),
        windows=[Blackout(now - timedelta(minutes=30), now + timedelta(minutes=30), "freeze")],
    )
    minutely_since = {"every": 1, "unit": "MINUTES", "start": now - timedelta(minutes=20)}
    frozen = api.create_interval(
        "frozen", topic="t", event_type="x", calendars=[freeze], **minutely_since
    )
    window = api.create_interval(
        "catch-up-window", topic="t", event_type="x", misfire_grace_seconds=60, **minutely_since
    )
    once = ScheduleFactory(start_ts=now - timedelta(seconds=1), max_fires=1)
    paused = ScheduleFactory(start_ts=now - timedelta(minutes=20))
    api.pause(paused.schedule_name, reason="maintenance", until=now + timedelta(hours=1))
    fire()
    for schedule, state in (
        (frozen, Health.NEW),  # its slots in the blackout were dropped: it waits for 30 min
        (window, Health.OK),  # the slots older than the catch-up window were dropped
        (once, Health.ENDED),  # it reached its fire limit
        (paused, Health.PAUSED),
    ):
        schedule.refresh_from_db()
        assert health_of(schedule).state == state, schedule.schedule_name
    assert Schedule.objects.get(pk=once.pk).state == ScheduleState.COMPLETED
    slots = recent_slots(frozen, db_now(), count=30)
    assert Outcome.MISSED not in {s.outcome for s in slots}
    every_reader_agrees(frozen, window, once, paused)
