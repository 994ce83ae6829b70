"""A calendar that drops every slot costs a few searches, not seconds of them: a freeze
over the whole week is known from the calendar alone (no search), and a closure of years
of days off is passed a month at a time; the fire path still sets such a row aside."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest

from django_dsched.firing.plan import plan
from django_dsched.timetables.calendars import Calendar, WeeklyWindow
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.filtered import Filtered, Shift
from django_dsched.timetables.grid import to_microseconds
from tests.timetables.test_filtered_dst import Counted

ZONE = "Europe/Brussels"
WHOLE_WEEK = (
    WeeklyWindow(0, time(0), 6, time(23, 59), ZONE, "freeze"),
    WeeklyWindow(6, time(23, 59), 0, time(0), ZONE, "and the last minute"),
)
WHEN = datetime(2026, 3, 18, 10, 0, 30, tzinfo=UTC)


def test_only_windows_of_one_zone_covering_the_whole_week_close_a_calendar():
    assert Calendar("frozen", windows=WHOLE_WEEK).always_closed
    wrapped = WeeklyWindow(3, time(9), 3, time(8), ZONE)  # Thursday 09:00 to Thursday 08:00
    assert not Calendar("an hour open", windows=(wrapped,)).always_closed
    hour = WeeklyWindow(3, time(8), 3, time(9), ZONE)
    assert Calendar("wrapped", windows=(wrapped, hour)).always_closed
    assert not Calendar("a minute open", windows=WHOLE_WEEK[:1]).always_closed
    other_zone = WeeklyWindow(6, time(23, 59), 0, time(0), "UTC")
    assert not Calendar("two zones", windows=(WHOLE_WEEK[0], other_zone)).always_closed
    assert not Calendar("no windows").always_closed


@pytest.mark.parametrize("policy", list(Shift))
def test_a_freeze_over_the_whole_week_drops_every_slot_without_a_search(policy):
    counted = Counted(CronTimetable("* * * * *", ZONE))
    table = Filtered(counted, [Calendar("ops", windows=WHOLE_WEEK)], policy, ZONE)
    assert table.slot_after(WHEN) is None
    assert table.slot_at_or_before(WHEN) is None
    assert counted.searches == 0  # was 5,000 skips and more: seconds for a per-minute cron
    assert table.fates(WHEN, WHEN + timedelta(minutes=2))[0].reason.startswith("blackout: freeze")


def test_a_closure_of_years_is_passed_a_month_at_a_time():
    closed = tuple((date(2026, 3, 1) + timedelta(days=d), "excluded") for d in range(7000))
    counted = Counted(CronTimetable("0 9 * * *", ZONE))
    table = Filtered(counted, [Calendar("closed", closed, frozenset())], Shift.OMIT, ZONE)
    reopens = datetime(2045, 4, 30, 7, 0, tzinfo=UTC)  # 09:00 summer time, after the closure
    assert table.slot_after(WHEN) == reopens
    assert table.slot_at_or_before(reopens - timedelta(microseconds=1)) == datetime(
        2026, 2, 28, 8, 0, tzinfo=UTC
    )
    assert counted.searches <= 500  # was a day at a time: 5,000 searches, then no slot


def test_the_fire_path_sets_a_frozen_row_aside():
    slot = WHEN.replace(second=0)
    row = (
        "frozen", "CRON", "", None, to_microseconds(slot - timedelta(days=1)),
        to_microseconds(slot), to_microseconds(WHEN), "* * * * *", ZONE, "COALESCE", None, 100,
        None, None, 0, 0, "", ["ops"], "BACKWARD", to_microseconds(slot), None,
    )  # fmt: skip
    decided = plan([row], None, {"ops": Calendar("ops", windows=WHOLE_WEEK)})
    assert [(schedule_id, "drop every slot" in why) for schedule_id, why in decided.aside] == [
        ("frozen", True)
    ]
