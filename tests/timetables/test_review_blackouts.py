"""Review probes: a blackout window under a moving policy (BACKWARD, FORWARD) is jumped as
OMIT jumps it. A slot in a window is dropped, not the rest of its day: a secondly rule with
a two-hour freeze fires again when the freeze ends, and a window spanning years costs a
plan no more than OMIT's."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from django_dsched.timetables import RRuleTimetable
from django_dsched.timetables.calendars import Blackout, Calendar
from django_dsched.timetables.filtered import Filtered, fates

FRIDAY = datetime(2026, 1, 2, tzinfo=UTC)
EVERY_DAY = frozenset[int]()  # no weekend: every day is a business day


def table(rule: str, policy: str, *windows: Blackout) -> Filtered:
    calendar = Calendar("freeze", weekend=EVERY_DAY, windows=windows)
    return Filtered(RRuleTimetable(rule, "UTC", FRIDAY - timedelta(days=1)), [calendar], policy)


@pytest.mark.parametrize("policy", ["OMIT", "FORWARD", "BACKWARD"])
def test_a_secondly_rule_fires_again_when_a_two_hour_freeze_ends(policy):
    freeze = Blackout(FRIDAY, FRIDAY + timedelta(hours=2))
    filtered = table("FREQ=SECONDLY", policy, freeze)
    assert filtered.slot_after(FRIDAY) == FRIDAY + timedelta(hours=2)
    assert filtered.slot_at_or_before(FRIDAY + timedelta(hours=2) - timedelta(seconds=1)) == (
        FRIDAY - timedelta(seconds=1)
    )
    assert filtered.slot_at_or_before(FRIDAY + timedelta(hours=3)) == FRIDAY + timedelta(hours=3)


@pytest.mark.parametrize("policy", ["FORWARD", "BACKWARD"])
def test_a_freeze_of_years_costs_a_moving_policy_no_more_than_omit(policy):
    freeze = Blackout(FRIDAY, FRIDAY + timedelta(days=3650))
    filtered = table("FREQ=SECONDLY", policy, freeze)
    began = time.monotonic()
    assert filtered.slot_after(FRIDAY) == freeze.end
    assert filtered.slot_at_or_before(FRIDAY + timedelta(days=30)) == FRIDAY - timedelta(seconds=1)
    assert time.monotonic() - began < 10  # it took minutes (a day of slots per day)


@pytest.mark.parametrize("policy", ["OMIT", "FORWARD", "BACKWARD"])
@pytest.mark.parametrize("rule", ["FREQ=DAILY", "FREQ=SECONDLY"])
def test_a_window_to_the_last_storable_day_leaves_no_slot_and_no_overflow(policy, rule):
    # calendar_window_t stores times before 9999-12-31: the search reaches the last days a
    # datetime holds (it raised OverflowError, set aside every schedule using the calendar).
    freeze = Blackout(FRIDAY, datetime(9999, 12, 30, tzinfo=UTC))
    filtered = table(rule, policy, freeze)
    assert filtered.slot_after(FRIDAY) is None
    assert [fate.kind for fate in fates(filtered, FRIDAY, FRIDAY + timedelta(days=1))][:1] == [
        "excluded"
    ]
