"""Catch-up finds its first slot on the grid (no walk over the backlog), and cron searches
next to a DST change cost what they cost on any other day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched.enums import FrequencyUnit, MisfirePolicy
from django_dsched.timetables import Rules, decide, timetable_for
from django_dsched.timetables import cron as cron_module
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.grid import Grid
from django_dsched.timetables.timetable import IntervalTimetable, Once

# The slot after each slot walked, per expression and zone (a cron timetable's slots are
# theirs alone): the examples walk over the same hours again and again, each slot_after is
# asked once.
_next_slot: dict[tuple[str, str, datetime], datetime | None] = {}


def slot_after(table, slot: datetime) -> datetime | None:
    if not isinstance(table, CronTimetable):
        return table.slot_after(slot)
    key = (table.expression, table.zone.key, slot)
    if key not in _next_slot:
        _next_slot[key] = table.slot_after(slot)
    return _next_slot[key]


def walked(table, oldest: datetime, latest: datetime, limit: int) -> datetime:
    """The rule in its plainest form: every slot from oldest to latest, keep the last
    ``limit`` of them."""
    slots = []
    slot = oldest
    while slot is not None and slot <= latest:
        slots.append(slot)
        slot = slot_after(table, slot)
    return slots[-limit:][0]


@settings(max_examples=150, deadline=None)
@given(
    unit=st.sampled_from(list(FrequencyUnit)),
    every=st.integers(1, 5),
    first=st.integers(0, 40),
    backlog=st.integers(0, 60),
    limit=st.integers(1, 80),
)
def test_interval_catch_up_start_is_computed_not_walked(unit, every, first, backlog, limit):
    grid = Grid(unit, every, datetime(2024, 1, 31, 9, 30, tzinfo=UTC))
    table = IntervalTimetable(grid)
    oldest, latest = grid.slot(first), grid.slot(first + backlog)
    assert table.rewind(latest, limit - 1, oldest) == walked(table, oldest, latest, limit)


ZONES_AND_DAYS = [
    ("Europe/Brussels", datetime(2026, 3, 28, 22, tzinfo=UTC)),  # spring forward at 01:00Z
    ("Europe/Brussels", datetime(2026, 10, 24, 22, tzinfo=UTC)),  # fall back at 01:00Z
    ("America/New_York", datetime(2026, 3, 8, 3, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 12, tzinfo=UTC)),  # 30 minutes
    ("UTC", datetime(2026, 3, 8, 3, tzinfo=UTC)),
]
EXPRESSIONS = ["*/20 * * * *", "*/5 1-3 * * *", "0,30 * * * *", "15 2 * * *", "* * * * * */30"]


@settings(max_examples=80, deadline=None)
@given(
    case=st.sampled_from(ZONES_AND_DAYS),
    expression=st.sampled_from(EXPRESSIONS),
    shift=st.integers(-6 * 60, 6 * 60),
    backlog_minutes=st.integers(0, 6 * 60),  # with the shift, backlogs across each change
    limit=st.integers(1, 120),
)
def test_cron_catch_up_start_matches_the_walk_across_transitions(
    case, expression, shift, backlog_minutes, limit
):
    zone, near = case
    table = CronTimetable(expression, zone)
    latest = table.slot_at_or_before(near + timedelta(minutes=shift))
    oldest = table.slot_at_or_after(latest - timedelta(minutes=backlog_minutes))
    cron_module._REWOUND.clear()
    assert table.rewind(latest, limit - 1, oldest) == walked(table, oldest, latest, limit)
    # Remembered walks moved on to a later latest give the same answer as a fresh walk.
    later = table.slot_at_or_before(latest + timedelta(minutes=37))
    assert table.rewind(later, limit - 1, oldest) == walked(table, oldest, later, limit)


class Counting(croniter):
    """croniter, counting the matches it is asked for."""

    steps = 0

    def get_next(self, *args, **kwargs):
        Counting.steps += 1
        return super().get_next(*args, **kwargs)

    def get_prev(self, *args, **kwargs):
        Counting.steps += 1
        return super().get_prev(*args, **kwargs)


@pytest.fixture
def steps(monkeypatch):
    monkeypatch.setattr(cron_module, "croniter", Counting)
    cron_module._REWOUND.clear()
    # Expressions parsed by earlier tests are cached as plain croniter: parse them again.
    cron_module._parsed.cache_clear()

    def count(work) -> int:
        Counting.steps = 0
        work()
        return Counting.steps

    yield count
    cron_module._parsed.cache_clear()  # and none parsed as Counting is left for later tests


def catch_up(table, next_slot: datetime, now: datetime, limit: int):
    rules = Rules(policy=MisfirePolicy.CATCH_UP, catch_up_limit=limit)
    return decide(table, rules, next_slot, now, 0)


def test_a_catch_up_fire_does_not_walk_its_backlog(steps):
    table = CronTimetable("* * * * * *", "UTC")
    now = datetime(2026, 5, 4, 12, 0, 0, 500_000, tzinfo=UTC)
    # Two hours behind, limit 10,000: the whole backlog fits. Before: 7,200 steps forward.
    fits = steps(lambda: catch_up(table, now - timedelta(hours=2), now, 10_000))
    assert fits <= 10
    # Four hours behind: the oldest of the latest 10,000 slots. The first fire walks back
    # once; the next fires move that walk on by the slots that came due since.
    behind = now - timedelta(hours=4)
    decision = catch_up(table, behind, now, 10_000)
    assert decision.slot == now.replace(microsecond=0) - timedelta(seconds=9_999)
    later = now + timedelta(seconds=3)
    following = steps(lambda: catch_up(table, decision.next_slot, later, 10_000))
    assert following <= 40
    assert catch_up(table, decision.next_slot, later, 10_000).slot == later.replace(
        microsecond=0
    ) - timedelta(seconds=9_999)


def test_interval_catch_up_is_arithmetic():
    table = timetable_for(
        "INTERVAL", start=datetime(2020, 1, 1, tzinfo=UTC), unit="SECONDS", every=1
    )
    now = datetime(2026, 5, 4, 12, tzinfo=UTC)
    decision = catch_up(table, datetime(2020, 1, 1, tzinfo=UTC), now, 10_000)
    assert decision.slot == now - timedelta(seconds=9_999)


def test_a_one_shot_catch_up_is_its_slot():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert Once(at).rewind(at, 99, at) == at


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 3, 28, 12, tzinfo=UTC),  # the day before spring forward
        datetime(2026, 10, 24, 12, tzinfo=UTC),  # the day before fall back
    ],
)
def test_cron_searches_near_a_dst_change_cost_what_they_cost_elsewhere(steps, when):
    table = CronTimetable("* * * * *", "Europe/Brussels")
    ordinary = datetime(2026, 3, 18, 12, tzinfo=UTC)

    def both(at: datetime) -> None:
        table.slot_after(at)
        table.slot_at_or_before(at)

    # Before: the search window spanned the whole hour of the jump (~120 steps).
    assert steps(lambda: both(when)) <= steps(lambda: both(ordinary)) <= 4


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 3, 18, 12, 0, 30, tzinfo=UTC),  # an ordinary Wednesday
        datetime(2026, 3, 27, 10, 0, 30, tzinfo=UTC),  # the Friday before the change
        datetime(2026, 3, 29, 3, 0, 30, tzinfo=UTC),  # two hours after the gap
    ],
)
def test_a_cron_search_away_from_a_jump_asks_croniter_for_one_match(steps, when):
    # The match found is the answer when no wall time on the far side of it can land on
    # this side (no offset change within two jumps): no second match to prove it.
    table = CronTimetable("* * * * *", "Europe/Brussels")
    assert steps(lambda: table.slot_after(when)) == 1
    assert steps(lambda: table.slot_at_or_before(when)) == 1


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 3, 29, 0, 30, 30, tzinfo=UTC),  # half an hour before the gap
        datetime(2026, 10, 25, 0, 30, 30, tzinfo=UTC),  # half an hour before the fold
    ],
)
def test_a_cron_search_next_to_a_jump_stops_at_a_wall_time_that_exists(steps, when):
    # Only a missing wall time (in the gap) can land after later ones: a match that exists
    # is the next fire, without stepping through the jump's hour of later wall times.
    table = CronTimetable("* * * * * */30", "Europe/Brussels")
    assert steps(lambda: table.slot_after(when)) == 1
    assert table.slot_after(when) == when + timedelta(seconds=30)
