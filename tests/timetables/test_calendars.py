"""Calendar-filtered timetables: holidays and weekends shift or drop slots, blackouts drop
them (across DST), and every planned slot tells its fate."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched.exceptions import CalendarError
from django_dsched.timetables.calendars import Blackout, Calendar, WeeklyWindow
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.filtered import Filtered, Shift, fates
from django_dsched.timetables.rrule import RRuleTimetable

BRUSSELS = "Europe/Brussels"
MONTH_END = "DTSTART:20260131T170000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=-1"


def brussels(*args: int) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(BRUSSELS)).astimezone(UTC)


def walk(table, start, end):
    slots, moment = [], start
    while (moment := table.slot_after(moment)) is not None and moment < end:
        slots.append(moment)
    return slots


def test_holidays_come_from_the_holidays_package_with_changes_by_hand():
    calendar = Calendar.of_holidays(
        "Belgium",
        "BE",
        [2026],
        added=[date(2026, 12, 24)],
        removed=[date(2026, 11, 11)],
    )
    assert calendar.day_off(date(2026, 12, 25)) == "holiday: Christmas Day"
    assert calendar.day_off(date(2026, 12, 24)) == "excluded date"
    assert calendar.day_off(date(2026, 11, 11)) is None  # Armistice Day, removed
    assert calendar.day_off(date(2026, 12, 26)) == "weekend"
    with pytest.raises(CalendarError, match="no holidays"):
        Calendar.of_holidays("Nowhere", "XX", [2026])
    with pytest.raises(CalendarError, match="no business day"):
        Calendar("all week", weekend=frozenset(range(7)))


@pytest.mark.parametrize(
    ("policy", "fires_at", "kind"),
    [
        (Shift.BACKWARD, brussels(2026, 12, 30, 17), "shifted"),
        (Shift.FORWARD, brussels(2027, 1, 4, 17), "shifted"),  # Jan 1 holiday, then a weekend
        (Shift.OMIT, None, "excluded"),
    ],
)
def test_a_month_end_run_on_a_holiday(policy, fires_at, kind):
    # December 31, 2026 is a Thursday; the calendar makes it a holiday.
    calendar = Calendar.of_holidays("Bank", "BE", [2026, 2027], added=[date(2026, 12, 31)])
    table = Filtered(RRuleTimetable(MONTH_END, BRUSSELS), [calendar], policy, BRUSSELS)
    fate = table.fate(brussels(2026, 12, 31, 17))
    assert (fate.fires_at, fate.kind, fate.calendar) == (fires_at, kind, "Bank")
    assert fate.reason == "excluded date"
    after = table.slot_after(brussels(2026, 12, 15))
    if fires_at is None:
        # January 31 and February 28, 2027 are Sundays: dropped too.
        assert after == brussels(2027, 3, 31, 17)
    else:
        assert after == fires_at
        assert table.slot_at_or_before(fires_at + timedelta(hours=1)) == fires_at
    assert "Bank" in fate.describe()


def test_last_business_day_of_the_month():
    calendar = Calendar.of_holidays("Belgium", "BE", [2026])
    table = Filtered(RRuleTimetable(MONTH_END, BRUSSELS), [calendar], Shift.BACKWARD, BRUSSELS)
    slots = walk(table, brussels(2026, 1, 1), brussels(2027, 1, 1))
    assert [slot.astimezone(UTC).date() for slot in slots][:6] == [
        date(2026, 1, 30),  # Saturday the 31st -> Friday
        date(2026, 2, 27),
        date(2026, 3, 31),
        date(2026, 4, 30),
        date(2026, 5, 29),  # Sunday the 31st -> Friday
        date(2026, 6, 30),
    ]
    assert all(calendar.day_off(slot.date()) is None for slot in slots)


def test_a_weekly_blackout_across_dst_keeps_its_wall_clock_hours():
    # Friday 18:00 to Monday 06:00 Brussels, over the weekend clocks spring forward.
    window = WeeklyWindow(4, time(18), 0, time(6), BRUSSELS, "weekend freeze")
    calendar = Calendar("Ops", weekend=frozenset(), windows=(window,))
    table = Filtered(CronTimetable("0 * * * *", BRUSSELS), [calendar], Shift.OMIT, BRUSSELS)
    slots = walk(table, brussels(2026, 3, 27, 12), brussels(2026, 3, 30, 12))
    assert brussels(2026, 3, 27, 17) in slots and brussels(2026, 3, 27, 18) not in slots
    assert brussels(2026, 3, 30, 5) not in slots and brussels(2026, 3, 30, 6) in slots
    assert not [s for s in slots if brussels(2026, 3, 27, 18) <= s < brussels(2026, 3, 30, 6)]
    dropped = [
        f
        for f in fates(table, brussels(2026, 3, 27, 12), brussels(2026, 3, 30, 12))
        if f.fires_at is None
    ]
    # 6 + 24 + 23 (clocks spring forward) + 6 wall hours inside the window.
    assert len(dropped) == 59
    assert dropped[0].describe().startswith("excluded by Ops (blackout: weekend freeze")


def test_a_one_off_freeze_and_nested_filters():
    freeze = Calendar(
        "Release freeze",
        weekend=frozenset(),
        windows=(Blackout(brussels(2026, 12, 18), brussels(2027, 1, 4), "release freeze"),),
    )
    holidays = Calendar.of_holidays("Belgium", "BE", [2026, 2027])
    daily = CronTimetable("0 9 * * *", BRUSSELS)
    table = Filtered(
        Filtered(daily, [holidays], Shift.OMIT, BRUSSELS), [freeze], Shift.OMIT, BRUSSELS
    )
    assert table.slot_after(brussels(2026, 12, 17, 10)) == brussels(2027, 1, 4, 9)
    assert table.slot_at_or_before(brussels(2027, 1, 3)) == brussels(2026, 12, 17, 9)
    kinds = {f.slot: f for f in table.fates(brussels(2026, 12, 17), brussels(2027, 1, 5))}
    assert kinds[brussels(2026, 12, 25, 9)].calendar == "Belgium"  # a holiday first
    assert kinds[brussels(2026, 12, 22, 9)].reason == "blackout: release freeze"
    assert kinds[brussels(2027, 1, 4, 9)].kind == "fires"


calendars = st.builds(
    lambda extra, weekend: Calendar(
        "C", tuple((date(2026, 3, 1) + timedelta(days=d), "excluded") for d in extra), weekend
    ),
    st.lists(st.integers(0, 60), max_size=12),
    st.sampled_from([frozenset({5, 6}), frozenset(), frozenset({4, 5, 6}), frozenset({6})]),
)


@settings(max_examples=40, deadline=None)
@given(
    calendar=calendars,
    policy=st.sampled_from(list(Shift)),
    expression=st.sampled_from(["0 9 * * *", "30 2 * * *", "0 8,17 * * 1-5", "0 */6 * * *"]),
    zone_name=st.sampled_from([BRUSSELS, "America/New_York", "UTC"]),
)
def test_the_timetable_fires_exactly_the_fates_that_fire(calendar, policy, expression, zone_name):
    # Plain oracle: each slot's fate, one by one, over a window with margins for shifts.
    table = Filtered(CronTimetable(expression, zone_name), [calendar], policy, zone_name)
    start, end = datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 4, 20, tzinfo=UTC)
    margin = timedelta(days=40)
    planned = table.fates(start - margin, end + margin)
    expected = sorted({f.fires_at for f in planned if f.fires_at and start < f.fires_at < end})
    assert walk(table, start, end) == expected
    for earlier, later in itertools.pairwise(expected):
        assert table.slot_at_or_before(later - timedelta(microseconds=1)) == earlier
    if len(expected) > 3:
        assert table.rewind(expected[-1], 2, start) == expected[-3]
