"""The misfire rules on their own: plain unit tests, no database.

Every case is a schedule every 10 minutes from midnight whose next slot is 00:00, looked at
from some "now"; the decision says which slot fires, which comes next, and whether slots
were missed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_dsched.enums import FrequencyUnit, MisfirePolicy
from django_dsched.timetables import Once, Rules, decide, first_slot, timetable_for

MIDNIGHT = datetime(2026, 3, 1, tzinfo=UTC)
TEN = timedelta(minutes=10)


def at(minutes: float) -> datetime:
    return MIDNIGHT + timedelta(minutes=minutes)


GRID = timetable_for("INTERVAL", start=MIDNIGHT, unit=FrequencyUnit.MINUTES, every=10)


DEFAULT = Rules()


def decided(now_minutes: float, rules: Rules = DEFAULT, fire_count: int = 0):
    return decide(GRID, rules, MIDNIGHT, at(now_minutes), fire_count)


class TestCoalesce:
    def test_on_time_fires_the_slot_and_moves_to_the_next(self):
        d = decided(0.5)
        assert (d.slot, d.next_slot, d.missed) == (at(0), at(10), False)

    def test_after_an_outage_fires_once_for_the_latest_slot(self):
        d = decided(35)
        assert (d.slot, d.next_slot, d.missed) == (at(30), at(40), True)

    def test_a_grace_turns_a_late_latest_slot_into_a_miss(self):
        d = decided(35, Rules(grace_seconds=60))
        assert (d.slot, d.next_slot, d.missed) == (None, at(40), True)


class TestCatchUp:
    def test_fires_the_oldest_missed_slot_first(self):
        d = decided(35, Rules(policy=MisfirePolicy.CATCH_UP))
        assert (d.slot, d.next_slot, d.missed) == (at(0), at(10), False)

    def test_keeps_only_the_latest_slots_within_the_limit(self):
        d = decided(35, Rules(policy=MisfirePolicy.CATCH_UP, catch_up_limit=2))
        assert (d.slot, d.next_slot, d.missed) == (at(20), at(30), True)

    def test_a_grace_skips_the_slots_older_than_it(self):
        d = decided(35, Rules(policy=MisfirePolicy.CATCH_UP, grace_seconds=16 * 60))
        assert (d.slot, d.next_slot, d.missed) == (at(20), at(30), True)


class TestSkip:
    def test_skip_has_a_default_grace_and_goes_on_from_the_next_slot(self):
        d = decided(35, Rules(policy=MisfirePolicy.SKIP))
        assert (d.slot, d.next_slot, d.missed) == (None, at(40), True)

    def test_skip_fires_a_slot_within_its_grace(self):
        d = decided(30.5, Rules(policy=MisfirePolicy.SKIP))
        assert (d.slot, d.next_slot, d.missed) == (at(30), at(40), True)


class TestBounds:
    def test_the_last_fire_before_the_end_completes_the_schedule(self):
        d = decided(20.5, Rules(end=at(25)))
        assert (d.slot, d.next_slot) == (at(20), None)

    def test_nothing_fires_after_the_end(self):
        d = decided(35, Rules(end=at(25)))
        assert (d.slot, d.next_slot) == (None, None)

    @pytest.mark.parametrize(("fired", "following"), [(3, None), (2, at(10))])
    def test_the_fire_that_reaches_max_fires_completes(self, fired, following):
        d = decided(0.5, Rules(max_fires=4), fire_count=fired)
        assert (d.slot, d.next_slot) == (at(0), following)

    def test_a_one_shot_fires_once_then_completes(self):
        d = decide(Once(at(5)), Rules(), at(5), at(6), 0)
        assert (d.slot, d.next_slot) == (at(5), None)


class TestFirstSlot:
    def test_starts_at_the_first_slot_not_before_the_start(self):
        assert first_slot(GRID, Rules(start=at(12)), at(0)) == at(20)

    def test_no_slot_within_the_bounds(self):
        assert first_slot(GRID, Rules(end=at(15)), at(16)) is None
