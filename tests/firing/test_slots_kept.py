"""No slot fires twice or is lost without a trace (issue 8, items 5 to 8; issue 23, item 4).

What the preview lists is what the fire path fires: ``tests.fire_path`` drives the fire
path's own decisions (``firing.plan``) through hundreds of slots; the database tests fire
through the real ``WRITE`` statement.
"""

from __future__ import annotations

import itertools
import random
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_dsched import api
from django_dsched.changes import pause_ends
from django_dsched.enums import MisfirePolicy, ScheduleKind, ScheduleState
from django_dsched.models import Event, Schedule
from django_dsched.scheduler import Scheduler
from django_dsched.timetables import jitter
from django_dsched.timetables.grid import Grid
from tests.factories import ScheduleFactory
from tests.fire_path import run_fire_path
from tests.helpers import sql

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)


def unsaved(**fields: object) -> Schedule:
    """A schedule placed as on creation, without the database."""
    schedule = Schedule(schedule_name="s", event_topic="t", event_type="x", **fields)
    schedule.place(schedule.start_ts)
    return schedule


# -- item 6: jitter larger than the grace or the period ---------------------------------------
@pytest.mark.parametrize(
    "fields",
    [
        # The cases: 19 and 79 of 200 fired.
        {"frequency_unit": "HOURS", "misfire_policy": MisfirePolicy.SKIP, "jitter_seconds": 600},
        {"frequency_unit": "MINUTES", "jitter_seconds": 300},
        {
            "frequency_unit": "MINUTES",
            "misfire_policy": MisfirePolicy.CATCH_UP,
            "jitter_seconds": 300,
        },
        {"frequency_unit": "MINUTES", "misfire_grace_seconds": 5, "jitter_seconds": 50},
        {
            "schedule_kind": ScheduleKind.CRON,
            "cron_expression": "*/5 * * * *",
            "misfire_policy": MisfirePolicy.SKIP,
            "jitter_seconds": 3600,
        },
        {
            # A day is 23 hours when clocks go forward: the jitter must stay inside it.
            "schedule_kind": ScheduleKind.CRON,
            "cron_expression": "30 1 * * *",
            "time_zone": "Europe/Brussels",
            "jitter_seconds": 86_400,
        },
    ],
    ids=[
        "hourly-skip-600",
        "minutely-300",
        "catch-up-300",
        "grace-5-jitter-50",
        "cron-5min",
        "cron-dst",
    ],
)
@given(schedule_id=st.uuids())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_previewed_fire_happens_whatever_the_jitter(fields, schedule_id):
    defaults = {"frequency_time": 1, "start_ts": T0}
    if fields.get("schedule_kind") == ScheduleKind.CRON:
        defaults = {"start_ts": T0}
    # Any id: the jitter of each slot is drawn from the schedule's id, and two neighbouring
    # slots' run times may fall closer than the 300 ms lag simulated here. Both are then
    # due at one poll; the earlier came due within the backlog window, so it fires first
    # and the later one in the next round: nothing is coalesced.
    schedule = unsaved(schedule_id=schedule_id, **{**defaults, **fields})
    preview = schedule.upcoming(200)
    run = run_fire_path(schedule, polls=200, lag=timedelta(milliseconds=300))
    assert len(run.fired_slots) == 200
    assert run.missed == 0
    assert run.fired_at == preview
    assert run.fired_slots == sorted(set(run.fired_slots))


def closest_neighbours(run_times: list[datetime]) -> timedelta:
    return min(later - earlier for earlier, later in itertools.pairwise(run_times))


@override_settings(DSCHED_POLL_INTERVAL=2.0)  # the default: a 2 s backlog window
@pytest.mark.parametrize("policy", [MisfirePolicy.COALESCE, MisfirePolicy.SKIP])
def test_neighbours_whose_run_times_fall_within_a_polls_lag_both_fire(policy):
    """Issue 23, item 4: jitter spreads run times over the whole gap, so two neighbouring
    slots can run a moment apart; a poll that lags by more than that used to find both due
    and coalesce them (8 of 8 such schedules lost a slot). Ids are drawn until eight have
    such a pair within the first 200 slots; a 1.5 s lag (under the 2 s window) makes such
    pairs common enough to find at once."""
    lag = timedelta(milliseconds=1500)
    rng = random.Random(23)
    found = 0
    for _ in range(5000):
        schedule = unsaved(
            schedule_id=uuid.UUID(int=rng.getrandbits(128), version=4),
            frequency_unit="MINUTES",
            frequency_time=1,
            start_ts=T0,
            jitter_seconds=300,
            misfire_policy=policy,
        )
        preview = schedule.upcoming(200)
        if closest_neighbours(preview) > lag:
            continue
        run = run_fire_path(schedule, polls=200, lag=lag)
        assert (run.fired_at, run.missed) == (preview, 0), schedule.schedule_id
        found += 1
        if found == 8:
            break
    assert found == 8


def test_jitter_is_unchanged_where_it_fits_in_the_gap():
    slot = datetime(2026, 5, 1, 9, tzinfo=UTC)
    for i in range(200):
        key = uuid.UUID(int=i)
        assert jitter(key, slot, 600, slot + timedelta(hours=1)) == jitter(key, slot, 600)
        assert jitter(key, slot, 600, slot + timedelta(minutes=1)) < timedelta(minutes=1)


pytestmark_db = pytest.mark.django_db(transaction=True)


def fire_all() -> int:
    return Scheduler(instance_id="test", batch_size=50).run_until_idle()


def fired_slots(schedule: Schedule) -> list[datetime]:
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )


def shift_back(schedule: Schedule, by: timedelta) -> None:
    """As if ``by`` had passed: every time of the schedule moves back."""
    sql(
        "UPDATE schedule_t SET start_ts = start_ts - %s, next_run_ts = next_run_ts - %s,"
        " next_slot_ts = next_slot_ts - %s,"
        " paused_until = paused_until - %s WHERE schedule_id = %s",
        [by, by, by, by, schedule.pk],
    )


@pytestmark_db
def test_a_jitter_longer_than_the_skip_grace_still_fires_through_the_database(db_now):
    # Due now, 601 s after its slot but only 11 to 41 s after its jittered run time: the
    # 60 s grace of SKIP is measured from the run time.
    start = db_now() - timedelta(seconds=601)
    key = next(
        uuid.UUID(int=i)
        for i in range(10_000)
        if timedelta(seconds=560)
        <= jitter(uuid.UUID(int=i), start, 600, start + timedelta(hours=1))
        <= timedelta(seconds=590)
    )
    schedule = ScheduleFactory(
        schedule_id=key,
        start_ts=start,
        frequency_unit="HOURS",
        misfire_policy=MisfirePolicy.SKIP,
        jitter_seconds=600,
    )
    assert schedule.next_run_ts <= db_now()
    assert fire_all() == 1
    schedule.refresh_from_db()
    assert fired_slots(schedule) == [start]
    assert schedule.misfire_count == 0
    assert schedule.next_slot_ts == start + timedelta(hours=1)
    assert api.preview(schedule, 1) == [schedule.next_run_ts]


@pytestmark_db
def test_jittered_slots_due_at_one_claim_within_the_window_both_fire_through_the_database(
    db_now, settings
):
    # A 2 min backlog window; a minutely schedule with jitter whose slots 90 and 30 s ago
    # both ran by now (the second one's jitter under 25 s): one claim finds both due. The
    # older fires, then the other one in the next round; nothing counts as missed.
    settings.DSCHED_POLL_INTERVAL = 120
    now = db_now()
    start = now - timedelta(seconds=90)
    second, third = start + timedelta(minutes=1), start + timedelta(minutes=2)

    def second_runs(key: uuid.UUID) -> datetime:
        return second + jitter(key, second, 300, third)

    # Seeded random ids: crc32 is linear, so ids that share all but a few characters (as
    # UUID(int=i) for small i do) get related jitters.
    rng = random.Random(4)
    key = next(
        key
        for key in (uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(10_000))
        if second_runs(key) <= now - timedelta(seconds=5)
    )
    schedule = ScheduleFactory(schedule_id=key, start_ts=start, jitter_seconds=300)
    assert schedule.next_run_ts <= second_runs(key) <= db_now()
    assert fire_all() == 2
    schedule.refresh_from_db()
    assert fired_slots(schedule) == [start, second]
    assert schedule.misfire_count == 0
    assert (schedule.next_slot_ts, schedule.next_run_ts) == (third, schedule.upcoming(1)[0])


# -- item 5: one calendar rule on every path, whatever Django's TIME_ZONE ------------------------
DJANGO_ZONES = ["Australia/Sydney", "America/New_York", "Europe/London", "Asia/Kolkata", "UTC"]


@given(
    django_zone=st.sampled_from(DJANGO_ZONES),
    own_zone=st.booleans(),
    unit=st.sampled_from(["HOURS", "DAYS", "WEEKS", "MONTHS", "YEARS"]),
    every=st.integers(1, 3),
    wall=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2027, 1, 1)),
    edited_after=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=800)),
    jitter_seconds=st.sampled_from([0, 1, 3600]),
)
# 02:00 with fold=1 on a spring-forward night in New York is 06:00Z, 01:00 EST there.
@example(
    django_zone="America/New_York",
    own_zone=True,
    unit="DAYS",
    every=1,
    wall=datetime(2024, 3, 10, 2, 0, fold=1),
    edited_after=timedelta(0),
    jitter_seconds=0,
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_edit_preview_and_fire_path_agree_in_any_django_time_zone(
    django_zone, own_zone, unit, every, wall, edited_after, jitter_seconds
):
    with override_settings(TIME_ZONE=django_zone):
        # What the admin's form hands over: the start in the user's (Django's) zone.
        start = timezone.make_aware(wall)
        zone = django_zone if own_zone else "UTC"
        schedule = Schedule(
            schedule_name="s",
            event_topic="t",
            event_type="x",
            frequency_unit=unit,
            frequency_time=every,
            start_ts=start,
            time_zone=zone,
            jitter_seconds=jitter_seconds,
        )
        schedule.place(start.astimezone(UTC) + edited_after)  # the edit path
        grid = Grid(unit, every, start.astimezone(UTC), zone)
        assert grid.slot_at_or_before(schedule.next_slot_ts) == schedule.next_slot_ts
        run = run_fire_path(schedule, polls=6)
        assert run.fired_at == schedule.upcoming(6)
        expected = [schedule.next_slot_ts]
        for _ in range(5):
            expected.append(grid.slot_after(expected[-1]))
        assert run.fired_slots == expected
        if unit != "HOURS":
            there = ZoneInfo(zone)
            # The start instant's wall time there. Not start.astimezone(there): in the same
            # zone that returns start as it came, and a wall time in a gap with fold=1
            # (02:00 on a spring-forward night) is an instant whose wall time is 01:00.
            local = start.astimezone(UTC).astimezone(there)
            assert {s.astimezone(there).time() for s in expected} <= {
                local.time(),
                # a wall time in a gap shifts past it
                (local + timedelta(hours=1)).time(),
                (local + timedelta(minutes=30)).time(),
            }


# -- item 7: pause until T --------------------------------------------------------------------
@pytestmark_db
def test_a_pause_until_a_slot_fires_that_slot(db_now):
    schedule = ScheduleFactory(
        start_ts=db_now() - timedelta(hours=3, minutes=10), frequency_unit="HOURS"
    )
    schedule.refresh_from_db()
    until = schedule.timetable().slot_after(db_now()) + timedelta(hours=1)  # the slot after next
    assert api.pause(schedule, reason="maintenance", until=until)
    # The preview shows what will fire: nothing before the end of the pause.
    assert api.preview(schedule.pk, 2) == [until, until + timedelta(hours=1)]
    # Time passes to just after the end of the pause; the leader's heartbeat resumes it.
    shift_back(schedule, until - db_now() + timedelta(seconds=2))
    assert pause_ends.resume_expired_pauses().resumed == 1
    schedule.refresh_from_db()
    slot = schedule.next_slot_ts
    assert (schedule.state, schedule.paused_until) == (ScheduleState.ACTIVE, None)
    assert slot <= db_now() - timedelta(seconds=1)
    assert fire_all() == 1
    assert fired_slots(schedule) == [slot]
    schedule.refresh_from_db()
    assert schedule.misfire_count == 0
    assert schedule.next_slot_ts == slot + timedelta(hours=1)


# -- item 8: fire_count counts distinct slots -------------------------------------------------
@pytestmark_db
def test_a_backfilled_slot_fired_again_by_catch_up_does_not_count(db_now):
    schedule = api.create_interval(
        "limited",
        every=1,
        unit="MINUTES",
        topic="t",
        event_type="x",
        max_fires=5,
        misfire_policy=MisfirePolicy.CATCH_UP,
    )
    api.pause(schedule)
    shift_back(schedule, timedelta(minutes=10, seconds=30))
    schedule.refresh_from_db()
    start = schedule.start_ts
    assert api.backfill(schedule, start, start + timedelta(minutes=2)) == (3, 0)
    assert api.resume(schedule, catch_up=True)
    fire_all()
    schedule.refresh_from_db()
    fired = fired_slots(schedule)
    # Slots 0..2 came from the backfill; catch-up found them fired and went on to 3 and 4.
    assert fired == [start + timedelta(minutes=k) for k in range(5)]
    assert schedule.fire_count == 5 == len(fired)
    assert schedule.state == ScheduleState.COMPLETED


@pytestmark_db
def test_max_fires_reached_by_run_now_completes_without_another_fire(db_now):
    schedule = api.create_interval(
        "twice", every=1, unit="MINUTES", topic="t", event_type="x", max_fires=2
    )
    api.trigger(schedule)
    api.trigger(schedule)  # two fires: the limit
    shift_back(schedule, timedelta(minutes=3))
    assert fire_all() == 0
    schedule.refresh_from_db()
    assert (schedule.state, schedule.fire_count) == (ScheduleState.COMPLETED, 2)
