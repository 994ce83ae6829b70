from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_dsched.enums import FrequencyUnit
from django_dsched.timetables.grid import FIXED_UNITS, Grid, NoMoreSlots, due_slot


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def months_oracle(start: datetime, months: int) -> datetime:
    """An independent month adder: move the month, clamp the day to the month's length."""
    index = start.year * 12 + (start.month - 1) + months
    year, month = divmod(index, 12)
    day = min(start.day, calendar.monthrange(year, month + 1)[1])
    return start.replace(year=year, month=month + 1, day=day)


class TestCalendarUnits:
    def test_month_end_anchor_clamps_and_recovers(self):
        grid = Grid(FrequencyUnit.MONTHS, 1, utc(2024, 1, 31, 9, 30))
        assert [grid.slot(k) for k in range(6)] == [
            utc(2024, 1, 31, 9, 30),
            utc(2024, 2, 29, 9, 30),  # leap year
            utc(2024, 3, 31, 9, 30),  # back to the 31st: no drift to the 29th
            utc(2024, 4, 30, 9, 30),
            utc(2024, 5, 31, 9, 30),
            utc(2024, 6, 30, 9, 30),
        ]

    def test_non_leap_february(self):
        grid = Grid(FrequencyUnit.MONTHS, 1, utc(2025, 1, 31))
        assert grid.slot(1) == utc(2025, 2, 28)
        assert grid.slot(2) == utc(2025, 3, 31)

    def test_yearly_leap_day(self):
        grid = Grid(FrequencyUnit.YEARS, 1, utc(2024, 2, 29, 12))
        assert [grid.slot(k) for k in range(1, 5)] == [
            utc(2025, 2, 28, 12),
            utc(2026, 2, 28, 12),
            utc(2027, 2, 28, 12),
            utc(2028, 2, 29, 12),
        ]

    def test_every_three_months(self):
        grid = Grid(FrequencyUnit.MONTHS, 3, utc(2026, 11, 30))
        assert grid.slot_after(utc(2026, 12, 1)) == utc(2027, 2, 28)
        assert grid.slot_after(utc(2027, 2, 28)) == utc(2027, 5, 30)

    @given(
        start=st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)),
        every=st.integers(1, 40),
        unit=st.sampled_from([FrequencyUnit.MONTHS, FrequencyUnit.YEARS]),
        offset_days=st.integers(0, 40_000),
        offset_seconds=st.integers(0, 86_399),
    )
    def test_calendar_grid_matches_oracle(self, start, every, unit, offset_days, offset_seconds):
        start = start.replace(tzinfo=UTC)
        grid = Grid(unit, every, start)
        when = start + timedelta(days=offset_days, seconds=offset_seconds)
        step = every * (12 if unit == FrequencyUnit.YEARS else 1)
        k = grid.index_at_or_before(when)
        assert grid.slot(k) == months_oracle(start, k * step)
        assert grid.slot(k) <= when < months_oracle(start, (k + 1) * step)
        assert grid.slot_after(when) == months_oracle(start, (k + 1) * step)


class TestFixedUnits:
    @given(
        start=st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)),
        unit=st.sampled_from(list(FIXED_UNITS)),
        every=st.integers(1, 1000),
        offset=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=20_000)),
    )
    def test_slots_are_on_the_grid_and_bracket_the_time(self, start, unit, every, offset):
        start = start.replace(tzinfo=UTC)
        grid = Grid(unit, every, start)
        period = FIXED_UNITS[unit] * every
        when = start + offset
        before = grid.slot_at_or_before(when)
        after = grid.slot_after(when)
        assert before <= when < after
        assert after - before == period
        assert (before - start) % period == timedelta(0)

    def test_before_the_anchor(self):
        grid = Grid(FrequencyUnit.HOURS, 1, utc(2026, 1, 1))
        assert grid.slot_at_or_before(utc(2025, 12, 31)) is None
        assert grid.slot_after(utc(2025, 12, 31)) == utc(2026, 1, 1)
        assert grid.slot_at_or_after(utc(2026, 1, 1)) == utc(2026, 1, 1)
        assert grid.slot_at_or_after(utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 1)


class TestDueSlot:
    @given(
        every=st.integers(1, 120),
        late=st.floats(min_value=0, max_value=0.999),
        missed=st.integers(0, 5000),
    )
    def test_drift_correction_and_coalescing(self, every, late, missed):
        start = utc(2026, 3, 1)
        grid = Grid(FrequencyUnit.SECONDS, every, start)
        period = timedelta(seconds=every)
        next_run = start + period * 3
        latest = next_run + period * missed
        now = latest + period * late
        slot, following = due_slot(grid, next_run, now)
        # One fire for the latest missed slot, then the grid continues: never from "now".
        assert slot == latest
        assert following == latest + period

    def test_never_fires_a_slot_before_next_run(self):
        # next_run off the grid (moved by hand): the fire is for next_run itself.
        grid = Grid(FrequencyUnit.MINUTES, 10, utc(2026, 1, 1))
        slot, following = due_slot(grid, utc(2026, 1, 1, 0, 15), utc(2026, 1, 1, 0, 16))
        assert slot == utc(2026, 1, 1, 0, 15)
        assert following == utc(2026, 1, 1, 0, 20)

    def test_end_of_calendar(self):
        grid = Grid(FrequencyUnit.YEARS, 100, utc(9950, 1, 1))
        slot, following = due_slot(grid, utc(9950, 1, 1), utc(9950, 1, 2))
        assert slot == utc(9950, 1, 1)
        assert following is None
        with pytest.raises(NoMoreSlots):
            grid.slot(1)


def test_grid_refuses_bad_definitions():
    with pytest.raises(ValueError, match="unknown"):
        Grid("FORTNIGHTS", 1, utc(2026, 1, 1))
    with pytest.raises(ValueError, match="positive"):
        Grid(FrequencyUnit.DAYS, 0, utc(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        Grid(FrequencyUnit.DAYS, 1, datetime(2026, 1, 1))


class TestMicrosecondFastPath:
    @given(
        start=st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)),
        unit=st.sampled_from(list(FrequencyUnit)),
        every=st.integers(1, 500),
        behind=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=5000)),
        extra=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    )
    def test_equals_the_datetime_path(self, start, unit, every, behind, extra):
        from django_dsched.timetables.grid import due_slot_us, from_microseconds, to_microseconds

        start = start.replace(tzinfo=UTC)
        grid = Grid(unit, every, start)
        next_run = grid.slot_at_or_after(start + behind)
        now = next_run + extra
        expected = due_slot(grid, next_run, now)
        slot, following = due_slot_us(
            unit, every, to_microseconds(start), to_microseconds(next_run), to_microseconds(now)
        )
        assert (from_microseconds(slot), following and from_microseconds(following)) == expected
