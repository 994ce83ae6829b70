"""Each kind of schedule and each misfire policy, fired through the real fire path.

Outages are simulated by moving a schedule's slots into the past in the database (its
start, next slot and next run shift back together), never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import MisfirePolicy, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def fire_all() -> int:
    return Scheduler(instance_id="test", batch_size=50).run_until_idle()


def shift_back(schedule: Schedule, by: timedelta) -> None:
    """As if the cluster had been down for ``by``: every time of the schedule moves back."""
    sql(
        "UPDATE schedule_t SET start_ts = start_ts - %s, next_run_ts = next_run_ts - %s,"
        " next_slot_ts = next_slot_ts - %s WHERE schedule_id = %s",
        [by, by, by, schedule.pk],
    )


def slots(schedule: Schedule) -> list:
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )


def interval(name="s", every=1, unit="MINUTES", **options):
    return api.create_interval(name, every=every, unit=unit, topic="t", event_type="x", **options)


def test_coalesce_fires_once_for_the_latest_missed_slot():
    schedule = interval()
    shift_back(schedule, timedelta(minutes=10, seconds=30))
    assert fire_all() == 1
    schedule.refresh_from_db()
    start = schedule.start_ts
    assert slots(schedule) == [start + timedelta(minutes=10)]
    assert schedule.next_slot_ts == start + timedelta(minutes=11)
    assert schedule.misfire_count == 1


def test_after_an_outage_coalesce_fires_the_backlog_once_then_the_slots_within_the_window(
    settings,
):
    # A 100 s backlog window (DSCHED_POLL_INTERVAL) on a minutely schedule down for an hour:
    # the slots due 20 and 80 s ago came due within it and fire each; slots 0..58 are the
    # backlog and fire once, for slot 58.
    settings.DSCHED_POLL_INTERVAL = 100
    schedule = interval()
    shift_back(schedule, timedelta(hours=1, seconds=20))
    assert fire_all() == 3
    schedule.refresh_from_db()
    start = schedule.start_ts
    assert slots(schedule) == [start + timedelta(minutes=k) for k in (58, 59, 60)]
    assert schedule.misfire_count == 1  # the coalesce
    assert schedule.fire_count == 3
    assert schedule.next_slot_ts == start + timedelta(minutes=61)


def test_skip_keeps_its_grace_whatever_the_window(settings):
    # A window longer than SKIP's 60 s grace: the grace still decides. The slot due 80 s
    # ago is past it (skipped with the backlog), the one due 20 s ago fires.
    settings.DSCHED_POLL_INTERVAL = 100
    schedule = interval(misfire_policy=MisfirePolicy.SKIP)
    shift_back(schedule, timedelta(hours=1, seconds=20))
    assert fire_all() == 1
    schedule.refresh_from_db()
    start = schedule.start_ts
    assert slots(schedule) == [start + timedelta(minutes=60)]
    assert schedule.misfire_count == 1
    assert schedule.next_slot_ts == start + timedelta(minutes=61)


def test_catch_up_fires_every_missed_slot_in_order():
    schedule = interval(misfire_policy=MisfirePolicy.CATCH_UP)
    shift_back(schedule, timedelta(minutes=10, seconds=30))
    assert fire_all() == 11  # slots 0..10
    schedule.refresh_from_db()
    fired = slots(schedule)
    assert fired == [schedule.start_ts + timedelta(minutes=k) for k in range(11)]
    assert OutboxMessage.objects.count() == 11


def test_catch_up_is_bounded():
    schedule = interval(misfire_policy=MisfirePolicy.CATCH_UP, catch_up_limit=3)
    shift_back(schedule, timedelta(minutes=10, seconds=30))
    assert fire_all() == 3
    schedule.refresh_from_db()
    assert slots(schedule) == [schedule.start_ts + timedelta(minutes=k) for k in (8, 9, 10)]


def test_skip_fires_no_missed_slot():
    schedule = interval(unit="HOURS", misfire_policy=MisfirePolicy.SKIP)
    shift_back(schedule, timedelta(hours=3, minutes=30))
    assert fire_all() == 0  # the latest slot is 30 min late: past the 60 s default grace
    schedule.refresh_from_db()
    assert schedule.next_slot_ts == schedule.start_ts + timedelta(hours=4)
    assert schedule.misfire_count == 1


def test_skip_still_fires_a_slot_that_is_only_a_little_late():
    schedule = interval(misfire_policy=MisfirePolicy.SKIP)
    shift_back(schedule, timedelta(seconds=5))
    assert fire_all() == 1


def test_grace_period_makes_coalesce_skip_old_slots():
    schedule = interval(every=1, unit="HOURS", misfire_grace_seconds=600)
    shift_back(schedule, timedelta(minutes=30))
    assert fire_all() == 0  # the only missed slot is 30 min late, past a 10 min grace
    schedule.refresh_from_db()
    assert schedule.next_slot_ts == schedule.start_ts + timedelta(hours=1)


def test_one_shot_fires_once_then_completes():
    schedule = api.create_once("once", delay=timedelta(0), topic="t", event_type="x")
    assert fire_all() == 1
    assert fire_all() == 0
    schedule.refresh_from_db()
    assert (schedule.state, schedule.active, schedule.fire_count) == (
        ScheduleState.COMPLETED,
        False,
        1,
    )


def test_one_shot_cancelled_before_it_fires_never_fires():
    schedule = api.create_once("once", delay=timedelta(0), topic="t", event_type="x")
    api.cancel(schedule)
    assert fire_all() == 0
    assert not Event.objects.filter(scheduled_ts__isnull=False).exists()


def test_a_one_shot_in_the_future_waits():
    api.create_once("later", delay=timedelta(hours=1), topic="t", event_type="x")
    assert fire_all() == 0


def test_max_fires_completes_the_schedule():
    schedule = interval(max_fires=2, misfire_policy=MisfirePolicy.CATCH_UP)
    shift_back(schedule, timedelta(minutes=5, seconds=1))
    assert fire_all() == 2
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.COMPLETED
    assert len(slots(schedule)) == 2


def test_end_time_completes_the_schedule():
    schedule = interval(misfire_policy=MisfirePolicy.CATCH_UP)
    shift_back(schedule, timedelta(minutes=10))
    schedule.refresh_from_db()
    Schedule.objects.filter(pk=schedule.pk).update(
        end_ts=schedule.start_ts + timedelta(minutes=2, seconds=30)
    )
    assert fire_all() == 3  # slots 0, 1 and 2; slot 3 is after the end
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.COMPLETED


def test_cron_schedule_fires_on_its_matches():
    schedule = api.create_cron(
        "every-5",
        cron="*/5 * * * *",
        topic="t",
        event_type="x",
        misfire_policy=MisfirePolicy.CATCH_UP,
    )
    shift_back(schedule, timedelta(minutes=30))
    fired = fire_all()
    assert 6 <= fired <= 7
    assert all(slot.minute % 5 == 0 and slot.second == 0 for slot in slots(schedule))


def test_jitter_spreads_fires_without_moving_the_grid():
    schedules = [interval(name=f"j{i}", jitter_seconds=30) for i in range(20)]
    for schedule in schedules:
        schedule.refresh_from_db()
    offsets = {s.next_run_ts - s.next_slot_ts for s in schedules}
    assert len(offsets) > 10
    assert all(timedelta(0) <= o < timedelta(seconds=30) for o in offsets)
    for schedule in schedules:
        shift_back(schedule, timedelta(minutes=3))
    fire_all()
    for schedule in schedules:
        schedule.refresh_from_db()
        assert all(
            (slot - schedule.start_ts) % timedelta(minutes=1) == timedelta(0)
            for slot in slots(schedule)
        )


def test_higher_priority_fires_first_among_schedules_due_together():
    low = interval(name="low", priority=-5)
    high = interval(name="high", priority=10)
    sql("UPDATE schedule_t SET next_run_ts = now() - interval '1 minute'")
    scheduler = Scheduler(instance_id="test", batch_size=1)
    scheduler.run_until_idle()
    order = list(
        Event.objects.filter(scheduled_ts__isnull=False)
        .order_by("aggregate_version", "event_ts")
        .values_list("aggregate_id", flat=True)
    )
    assert order[0] == high.pk
    assert set(order) == {low.pk, high.pk}
    assert OutboxMessage.objects.get(aggregate_id=high.pk).priority == 10
