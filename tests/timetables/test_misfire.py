"""The misfire rules on their own: plain unit tests, no database.

Every case is a schedule every 10 minutes from midnight whose next slot is 00:00, looked at
from some "now"; the decision says which slot fires, which comes next, and whether slots
were missed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_dsched.enums import FrequencyUnit, MisfirePolicy
from django_dsched.timetables import Once, Rules, backlog_window, decide, first_slot, timetable_for

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


# -- the backlog window: lag never coalesces, an outage still does ----------------------------
SECOND = timedelta(seconds=1)
EVERY_SECOND = timetable_for("INTERVAL", start=MIDNIGHT, unit=FrequencyUnit.SECONDS, every=1)


def rounds(rules: Rules, now: datetime, window: timedelta, table=EVERY_SECOND):
    """Decide round after round at one ``now`` while the schedule stays due, as the leader
    does (a fired row whose next run is due is claimed again at once): (slot, missed) of
    each round."""
    done = []
    next_slot = MIDNIGHT
    while next_slot is not None and rules.run_time(table, next_slot) <= now:
        d = decide(table, rules, next_slot, now, len(done), window)
        done.append((d.slot, d.missed))
        next_slot = d.next_slot
    return done


def sec(seconds: float) -> datetime:
    return MIDNIGHT + timedelta(seconds=seconds)


class TestBacklogWindow:
    def test_the_window_is_the_poll_interval_and_at_least_a_second(self, settings):
        settings.DSCHED_POLL_INTERVAL = 5
        assert backlog_window() == 5 * SECOND
        settings.DSCHED_POLL_INTERVAL = 0.2
        assert backlog_window() == SECOND

    def test_slots_due_within_the_window_fire_one_per_round_oldest_first(self):
        # A poll 1.5 s late on an every-second schedule: both slots fire, none is missed.
        assert rounds(DEFAULT, sec(1.5), 2 * SECOND) == [(sec(0), False), (sec(1), False)]

    def test_a_slot_due_for_the_whole_window_is_backlog(self):
        # 00:00 has been due for exactly the window: coalesced with nothing, it just fires.
        d = decide(EVERY_SECOND, DEFAULT, sec(0), sec(2), 0, 2 * SECOND)
        assert (d.slot, d.next_slot, d.missed) == (sec(0), sec(1), False)
        # 00:00 and 00:01 are backlog at 00:03.5: one fire, for 00:01; then 00:02, 00:03.
        assert rounds(DEFAULT, sec(3.5), 2 * SECOND) == [
            (sec(1), True),
            (sec(2), False),
            (sec(3), False),
        ]

    def test_after_an_outage_coalesce_fires_once_for_the_backlog_then_the_recent_slots(self):
        # 100.5 s down, a 2 s window: the backlog (00:00..01:38) fires once, for its latest
        # slot; 01:39 and 01:40 came due within the window: ceil(window / period) of them.
        assert rounds(DEFAULT, sec(100.5), 2 * SECOND) == [
            (sec(98), True),
            (sec(99), False),
            (sec(100), False),
        ]
        # With no slot inside the window it is one fire, as before.
        d = decide(GRID, DEFAULT, MIDNIGHT, at(35), 0, 2 * SECOND)
        assert (d.slot, d.next_slot, d.missed) == (at(30), at(40), True)

    def test_skip_keeps_its_grace(self):
        skip = Rules(policy=MisfirePolicy.SKIP)  # 60 s grace
        # Down 100.5 s: the backlog's latest slot is within the grace and fires.
        assert rounds(skip, sec(100.5), 2 * SECOND) == [
            (sec(98), True),
            (sec(99), False),
            (sec(100), False),
        ]
        # Down 35 minutes on the 10-minute grid: nothing within the grace, nothing fires.
        d = decide(GRID, skip, MIDNIGHT, at(35), 0, 2 * SECOND)
        assert (d.slot, d.next_slot, d.missed) == (None, at(40), True)

    def test_a_grace_shorter_than_the_window_skips_the_backlog_and_fires_what_is_within_it(self):
        # Grace 1 s, window 5 s: 00:00..01:39 are missed (skipped), 01:40 fires in the same
        # round, and the schedule goes on from 01:41.
        rules = Rules(policy=MisfirePolicy.SKIP, grace_seconds=1)
        assert rounds(rules, sec(100.5), 5 * SECOND) == [(sec(100), True)]
        d = decide(EVERY_SECOND, rules, MIDNIGHT, sec(100.5), 0, 5 * SECOND)
        assert d.next_slot == sec(101)

    def test_a_catch_up_is_unchanged_by_the_window(self):
        rules = Rules(policy=MisfirePolicy.CATCH_UP, catch_up_limit=3)
        assert rounds(rules, sec(100.5), 2 * SECOND) == [
            (sec(98), True),
            (sec(99), False),
            (sec(100), False),
        ]
        assert rounds(rules, sec(100.5), 60 * SECOND) == rounds(rules, sec(100.5), SECOND)

    def test_bounds_still_apply_to_the_recent_slots(self):
        assert rounds(Rules(end=sec(99)), sec(100.5), 2 * SECOND) == [
            (sec(98), True),
            (sec(99), False),
        ]
        assert rounds(Rules(max_fires=2), sec(100.5), 2 * SECOND) == [
            (sec(98), True),
            (sec(99), False),
        ]
