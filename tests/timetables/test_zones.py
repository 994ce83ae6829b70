"""The declared calendar rule of interval grids, in several time zones.

SECONDS/MINUTES/HOURS are durations on the UTC timeline; DAYS/WEEKS/MONTHS/YEARS step the
wall clock of the schedule's zone from the anchor, with cron's DST rule (a missing wall time
shifts past the gap, a repeated one means its first occurrence). The oracle is dateutil's
own tz implementation (``resolve_imaginary`` shifts past a gap; fold 0 is the first
occurrence), independent of the zoneinfo code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil import tz as dateutil_tz
from dateutil.relativedelta import relativedelta
from django.test import override_settings
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from django_dsched.enums import FrequencyUnit, MisfirePolicy
from django_dsched.firing.plan import Plan, _plan_one, plan
from django_dsched.timetables import backlog_window
from django_dsched.timetables.grid import (
    ABSOLUTE_UNITS,
    DAYS_PER_UNIT,
    MONTHS_PER_UNIT,
    Grid,
    due_slot,
    due_slot_us,
    from_microseconds,
    to_microseconds,
)

ZONES = [
    "UTC",
    "Australia/Sydney",
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",  # negative DST in tzdata
    "Australia/Lord_Howe",  # 30-minute shifts
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # transitions at midnight
    "Asia/Kolkata",  # no DST
    "Pacific/Apia",  # skipped a whole day in 2011
    "Etc/GMT-5",  # a fixed offset
]
CALENDAR_UNITS = [*DAYS_PER_UNIT, *MONTHS_PER_UNIT]
starts = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1))


def oracle_instant(wall: datetime, zone: str) -> datetime:
    """The instant of a wall time by the documented rule, computed with dateutil.tz."""
    aware = dateutil_tz.resolve_imaginary(wall.replace(tzinfo=dateutil_tz.gettz(zone)))
    return aware.astimezone(UTC)


def step(unit: str, every: int, k: int) -> timedelta | relativedelta:
    if unit in MONTHS_PER_UNIT:
        return relativedelta(months=MONTHS_PER_UNIT[unit] * every * k)
    return timedelta(days=DAYS_PER_UNIT[unit] * every * k)


class TestTheRule:
    @given(
        start=starts,
        zone=st.sampled_from(ZONES),
        unit=st.sampled_from(CALENDAR_UNITS),
        every=st.integers(1, 30),
        k=st.integers(1, 400),
    )
    @settings(max_examples=400)
    def test_calendar_units_step_the_zones_wall_clock(self, start, zone, unit, every, k):
        assume(unit not in MONTHS_PER_UNIT or MONTHS_PER_UNIT[unit] * every * k < 12 * 500)
        anchor = start.replace(tzinfo=ZoneInfo(zone))
        grid = Grid(unit, every, anchor, zone)
        # The wall time of the start instant (a start typed in a DST gap is stored as the
        # instant it resolves to, and its wall clock is that instant's, as every door has it).
        wall = anchor.astimezone(UTC).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        # dateutil reads only the zone files' explicit transitions, which end in 2037; past
        # them it gets DST wrong (zoneinfo follows the files' rule): keep the oracle within.
        assume((wall + step(unit, every, k)).year < 2037)
        assert grid.slot(0) == anchor.astimezone(UTC)
        assert grid.slot(k) == oracle_instant(wall + step(unit, every, k), zone)

    @given(
        start=starts,
        zone=st.sampled_from(ZONES),
        unit=st.sampled_from(list(ABSOLUTE_UNITS)),
        every=st.integers(1, 500),
        k=st.integers(0, 5000),
    )
    def test_seconds_to_hours_are_durations_whatever_the_zone(self, start, zone, unit, every, k):
        anchor = start.replace(tzinfo=ZoneInfo(zone))
        grid = Grid(unit, every, anchor, zone)
        assert grid.slot(k) == anchor.astimezone(UTC) + ABSOLUTE_UNITS[unit] * every * k

    def test_daily_at_nine_in_sydney_stays_at_nine_across_dst(self):
        sydney = ZoneInfo("Australia/Sydney")
        grid = Grid(
            FrequencyUnit.DAYS, 1, datetime(2026, 9, 30, 9, tzinfo=sydney), "Australia/Sydney"
        )
        # Clocks go forward on 2026-10-04: 09:00 AEST is 23:00 UTC, 09:00 AEDT 22:00 UTC.
        slots = [grid.slot(k) for k in range(8)]
        assert {s.astimezone(sydney).hour for s in slots} == {9}
        assert slots[3] == datetime(2026, 10, 2, 23, tzinfo=UTC)  # Oct 3, 09:00 AEST
        assert slots[4] == datetime(2026, 10, 3, 22, tzinfo=UTC)  # Oct 4, 09:00 AEDT
        assert slots[4] - slots[3] == timedelta(hours=23)

    def test_a_wall_time_in_the_gap_shifts_past_it_and_a_repeated_one_is_the_first(self):
        new_york = "America/New_York"
        grid = Grid(
            FrequencyUnit.DAYS, 1, datetime(2026, 3, 7, 2, 30, tzinfo=ZoneInfo(new_york)), new_york
        )
        assert grid.slot(1) == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)  # 03:30 EDT
        grid = Grid(
            FrequencyUnit.DAYS,
            1,
            datetime(2026, 10, 31, 1, 30, tzinfo=ZoneInfo(new_york)),
            new_york,
        )
        assert grid.slot(1) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # the first 01:30

    def test_utc_grids_are_unchanged(self):
        # Existing schedules (time zone UTC) keep their exact grid: days are 24 hours.
        start = datetime(2024, 1, 31, 9, 30, tzinfo=UTC)
        assert Grid(FrequencyUnit.DAYS, 3, start).slot(100) == start + timedelta(days=300)
        assert Grid(FrequencyUnit.MONTHS, 1, start).slot(1) == datetime(
            2024, 2, 29, 9, 30, tzinfo=UTC
        )


class TestWhateverZoneTheStartArrivesIn:
    """The root of the double fire: the admin hands the start over in the user's zone
    (Django's TIME_ZONE); arithmetic on that datetime stepped the user's wall clock."""

    @given(
        start=st.datetimes(
            min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1), timezones=st.just(UTC)
        ),
        arrives_in=st.sampled_from(ZONES),
        zone=st.sampled_from(["UTC", "Australia/Sydney", "America/New_York"]),
        unit=st.sampled_from(list(FrequencyUnit)),
        every=st.integers(1, 40),
        offset=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=4000)),
    )
    def test_the_grid_is_the_same(self, start, arrives_in, zone, unit, every, offset):
        canonical = Grid(unit, every, start, zone)
        shown = Grid(unit, every, start.astimezone(ZoneInfo(arrives_in)), zone)
        when = (start + offset).astimezone(ZoneInfo(arrives_in))
        assert shown.slot_after(when) == canonical.slot_after(when)
        assert shown.slot_at_or_before(when) == canonical.slot_at_or_before(when)
        assert shown.slot_after(when).tzinfo is UTC


class TestSearch:
    @given(
        start=starts,
        zone=st.sampled_from(ZONES),
        unit=st.sampled_from(list(FrequencyUnit)),
        every=st.integers(1, 50),
        offset=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=6000)),
    )
    def test_slots_bracket_any_time_and_never_go_backwards(self, start, zone, unit, every, offset):
        anchor = start.replace(tzinfo=ZoneInfo(zone))
        grid = Grid(unit, every, anchor, zone)
        when = anchor + offset
        k = grid.index_at_or_before(when)
        before, after = grid.slot(k), grid.slot(k + 1)
        assert before <= when < after
        assert grid.slot_at_or_before(when) == before
        assert grid.slot_after(when) == after
        assert grid.slot_at_or_after(when) == (before if before == when else after)
        assert grid.slot(k + 2) >= after


class TestFastPath:
    @given(
        start=starts,
        zone=st.sampled_from(ZONES),
        unit=st.sampled_from(list(FrequencyUnit)),
        every=st.integers(1, 500),
        behind=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=5000)),
        extra=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    )
    @settings(max_examples=300)
    def test_equals_the_datetime_path_in_every_zone(self, start, zone, unit, every, behind, extra):
        anchor = start.replace(tzinfo=ZoneInfo(zone))
        grid = Grid(unit, every, anchor, zone)
        next_run = grid.slot_at_or_after(anchor + behind)
        now = next_run + extra
        expected = due_slot(grid, next_run, now)
        slot, following = due_slot_us(
            unit,
            every,
            to_microseconds(anchor),
            to_microseconds(next_run),
            to_microseconds(now),
            zone,
        )
        assert (from_microseconds(slot), following and from_microseconds(following)) == expected

    @given(
        start=starts,
        zone=st.sampled_from(ZONES),
        grid=st.one_of(
            st.tuples(st.sampled_from(list(FrequencyUnit)), st.integers(1, 500)),
            # Periods shorter than the backlog window: several slots come due within it.
            st.tuples(st.just(FrequencyUnit.SECONDS), st.integers(1, 5)),
        ),
        behind=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=5000)),
        lag=st.one_of(
            st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=30)),
            st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
        ),
        poll=st.sampled_from([0.2, 1.0, 2.0, 7.5]),
    )
    @settings(max_examples=300, deadline=None)
    def test_plan_fast_path_equals_the_decide_path_round_after_round(
        self, start, zone, grid, behind, lag, poll
    ):
        """``plan()``'s integer path for a plain COALESCE interval row against the path every
        other row takes (``misfire.decide``), through the rounds a leader fires at one now."""
        unit, every = grid
        anchor = start.replace(tzinfo=ZoneInfo(zone))
        next_slot = Grid(unit, every, anchor, zone).slot_at_or_after(anchor + behind)
        now = to_microseconds(next_slot + lag)
        row = [
            "0190a6f2-0000-7000-8000-000000000001", "INTERVAL", unit, every,
            to_microseconds(anchor), to_microseconds(next_slot), now, "", zone,
            MisfirePolicy.COALESCE, None, 100, None, None, 0, 0, "", None, "OMIT", None, None,
        ]  # fmt: skip
        with override_settings(DSCHED_POLL_INTERVAL=poll):
            for _ in range(8):  # a leader claims a row again while its next run is due
                fast = plan([tuple(row)])
                slow = Plan()
                _plan_one(slow, tuple(row), backlog_window())
                assert fast == slow
                if not fast.again:
                    break
                row[5] = fast.next_slots[0]


@pytest.mark.parametrize("zone", ["UTC", "Etc/GMT-5", "Etc/GMT+10"])
def test_day_grids_in_fixed_offset_zones_are_exact_durations(zone):
    start = datetime(2026, 3, 1, 9, tzinfo=ZoneInfo(zone))
    grid = Grid(FrequencyUnit.WEEKS, 2, start, zone)
    assert [grid.slot(k) for k in range(30)] == [start + timedelta(weeks=2 * k) for k in range(30)]
