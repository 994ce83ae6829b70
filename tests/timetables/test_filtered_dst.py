"""BACKWARD / FORWARD next to a DST change: the searches that jump over the slots which
cannot move past an instant (``timetables/moves.py``) give what the slow walk, one slot at
a time, gives, in zones whose clocks change at 02:00, at midnight, by half an hour, and
never; the slots moved onto a fire are all found (``Filtered.origins``, against every
slot's fate); and a per-minute cron costs a few searches of the cron, not an hour's."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched.timetables.calendars import Calendar, WeeklyWindow
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.filtered import Filtered, Shift

MICROSECOND = timedelta(microseconds=1)
# Days on which the zone's clocks change (2026), both ways.
CHANGES = {
    "Europe/Brussels": [date(2026, 3, 29), date(2026, 10, 25)],
    "America/New_York": [date(2026, 3, 8), date(2026, 11, 1)],
    "America/Havana": [date(2026, 3, 8), date(2026, 11, 1)],  # at midnight
    "America/Santiago": [date(2026, 4, 5), date(2026, 9, 6)],  # at midnight
    "Australia/Lord_Howe": [date(2026, 4, 5), date(2026, 10, 4)],  # half an hour
    "UTC": [date(2026, 3, 29)],
}
# Every change above falls on a Sunday: expressions firing on some days only make the
# change day's slots (or those moved onto it) the ones a search must find.
EXPRESSIONS = [
    "* 0-3 * * 0", "*/7 * * * 0,1", "30 2 * * 6", "15,45 0-4 * * 1", "* 0-3 * * *",
    "*/7 * * * *", "0 23 * * 0",
]  # fmt: skip


class Walked(Filtered):
    """The oracle: the slow walk, one of ``inner``'s slots at a time."""

    def _past(self, slot, source, business, when):
        return self._slots.slot_after(slot)

    def _upto(self, slot, source, business, when):
        return self._slots.slot_at_or_before(slot - MICROSECOND)


class Counted:
    """A timetable that counts the searches asked of it."""

    def __init__(self, inner):
        self.inner, self.searches = inner, 0

    def slot_after(self, when):
        self.searches += 1
        return self.inner.slot_after(when)

    def slot_at_or_before(self, when):
        self.searches += 1
        return self.inner.slot_at_or_before(when)

    def slot_at_or_after(self, when):
        self.searches += 1
        return self.inner.slot_at_or_after(when)

    def rewind(self, latest, steps, oldest):
        return self.inner.rewind(latest, steps, oldest)


def calendar(weekend, days_off, change, freeze):
    excluded = tuple((change + timedelta(days=d), "excluded") for d in days_off)
    windows = (WeeklyWindow(2, time(1, 30), 2, time(2, 40), "UTC", "freeze"),) if freeze else ()
    return Calendar("ops", excluded, weekend, windows)


@settings(max_examples=150, deadline=None)
@given(
    zone_name=st.sampled_from(sorted(CHANGES)),
    which=st.integers(0, 1),
    expression=st.sampled_from(EXPRESSIONS),
    policy=st.sampled_from([Shift.BACKWARD, Shift.FORWARD]),
    weekend=st.sampled_from([frozenset({5, 6}), frozenset(), frozenset({6}), frozenset({0})]),
    days_off=st.lists(st.integers(-3, 3), max_size=3),
    freeze=st.booleans(),
    day=st.integers(-3, 3),
    minutes=st.integers(0, 300) | st.integers(0, 1439),  # mostly the hours the crons fire
    seconds=st.integers(0, 59),
)
def test_the_jumping_searches_agree_with_the_slow_walk_across_dst(
    zone_name, which, expression, policy, weekend, days_off, freeze, day, minutes, seconds
):
    change = CHANGES[zone_name][which % len(CHANGES[zone_name])]
    cal = calendar(weekend, days_off, change, freeze)
    inner = CronTimetable(expression, zone_name)
    fast = Filtered(inner, [cal], policy, zone_name)
    slow = Walked(inner, [cal], policy, zone_name)
    clock = datetime.combine(change + timedelta(days=day), time()) + timedelta(minutes=minutes)
    when = clock.replace(tzinfo=ZoneInfo(zone_name)).astimezone(UTC) + timedelta(seconds=seconds)
    for moment in (when, when.replace(second=0)):
        assert fast.slot_after(moment) == slow.slot_after(moment), moment
        assert fast.slot_at_or_before(moment) == slow.slot_at_or_before(moment), moment
        assert fast.slot_at_or_after(moment) == slow.slot_at_or_after(moment), moment


@settings(max_examples=20, deadline=None)
@given(
    zone_name=st.sampled_from(sorted(CHANGES)),
    which=st.integers(0, 1),
    expression=st.sampled_from(["*/5 0-4 * * *", "30 2 * * *", "15,45 0-3 * * *"]),
    policy=st.sampled_from([Shift.BACKWARD, Shift.FORWARD]),
    weekend=st.sampled_from([frozenset({5, 6}), frozenset(), frozenset({6}), frozenset({0})]),
    days_off=st.lists(st.integers(-3, 3), max_size=3),
)
def test_every_slot_moved_onto_a_fire_is_found_across_dst(
    zone_name, which, expression, policy, weekend, days_off
):
    change = CHANGES[zone_name][which % len(CHANGES[zone_name])]
    table = Filtered(
        CronTimetable(expression, zone_name), [calendar(weekend, days_off, change, False)],
        policy, zone_name,
    )  # fmt: skip
    start = datetime.combine(change - timedelta(days=3), time(), UTC)
    end = start + timedelta(days=6)
    planned = table.fates(start - timedelta(days=8), end + timedelta(days=8))  # shifts: < 8 days
    fire = table.slot_at_or_after(start)
    while fire is not None and fire < end:
        expected = sorted(f.slot for f in planned if f.fires_at == fire)
        assert sorted(f.slot for f in table.origins(fire)) == expected, fire
        fire = table.slot_after(fire)


def test_a_per_minute_cron_moved_next_to_dst_costs_a_few_searches():
    # The Friday before the clocks change in Brussels: BACKWARD moves the weekend's slots
    # onto it, and the Sunday's (the day of the change) need the DST allowance.
    zone_name = "Europe/Brussels"
    counted = Counted(CronTimetable("* * * * *", zone_name))
    table = Filtered(counted, [Calendar("ops")], Shift.BACKWARD, zone_name)
    when = datetime(2026, 3, 27, 10, 0, 30, tzinfo=UTC)
    assert table.slot_after(when) == datetime(2026, 3, 27, 10, 1, tzinfo=UTC)
    assert table.slot_at_or_before(when) == datetime(2026, 3, 27, 10, 0, tzinfo=UTC)
    fired = [f.slot for f in table.origins(datetime(2026, 3, 27, 10, 0, tzinfo=UTC))]
    assert fired == [
        datetime(2026, 3, 27, 10, 0, tzinfo=UTC),
        datetime(2026, 3, 28, 10, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 9, 0, tzinfo=UTC),  # 11:00 summer time, the Sunday
    ]
    assert counted.searches <= 20  # was 250 (an hour of the Sunday's slots, both ways)
