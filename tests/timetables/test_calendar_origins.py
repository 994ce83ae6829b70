"""What the fire path records of calendars (``Filtered.origins``, ``fates_to_record``)
against the plain oracle, every planned slot's fate: each slot a calendar moved is told by
the fire it lands on, each slot it dropped by the plan that passes it, once, whatever the
policy, the zone (DST included) or the nesting."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched.timetables.calendars import Calendar
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.filtered import Filtered, Shift, fates_to_record

calendars = st.builds(
    lambda extra, weekend, name: Calendar(
        name, tuple((date(2026, 3, 1) + timedelta(days=d), "excluded") for d in extra), weekend
    ),
    st.lists(st.integers(0, 60), max_size=12),
    st.sampled_from([frozenset({5, 6}), frozenset(), frozenset({4, 5, 6}), frozenset({6})]),
    st.sampled_from(["A", "B"]),
)


def walk(table, start, end):
    slots, moment = [], start
    while (moment := table.slot_after(moment)) is not None and moment < end:
        slots.append(moment)
    return slots


@settings(max_examples=30, deadline=None)
@given(
    first=calendars,
    second=st.none() | calendars,
    policies=st.tuples(st.sampled_from(list(Shift)), st.sampled_from(list(Shift))),
    expression=st.sampled_from(["0 9 * * *", "30 2 * * *", "0 8,17 * * 1-5", "0 */6 * * *"]),
    zone_name=st.sampled_from(["Europe/Brussels", "America/New_York", "UTC"]),
)
def test_the_fates_recorded_along_the_fires_are_the_oracles(
    first, second, policies, expression, zone_name
):
    inner = CronTimetable(expression, zone_name)
    table = Filtered(inner, [first], policies[0], zone_name)
    if second is not None:  # nested: another calendar with its own policy
        table = Filtered(table, [second], policies[1], zone_name)
    start, end = datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 4, 20, tzinfo=UTC)
    planned = table.fates(start - timedelta(days=40), end + timedelta(days=40))
    fires = walk(table, start, end)

    # Each fire's origins: exactly the planned slots the oracle sends there.
    for slot in fires:
        expected = {(f.slot, f.kind) for f in planned if f.fires_at == slot}
        assert {(f.slot, f.kind) for f in table.origins(slot)} == expected

    # The plans from one fire to the next record each moved slot once (at its fire) and
    # each dropped slot once (when passed).
    recorded = []
    for fired, following in itertools.pairwise(fires):
        recorded += fates_to_record(table, fired, following, fired)
    inside = [f for f in planned if fires[0] <= f.slot < fires[-1]] if fires else []
    shifted = sorted(
        (f.slot, f.fires_at)
        for f in planned
        if f.kind == "shifted" and fires and fires[0] <= f.fires_at < fires[-1]
    )
    assert sorted((f.slot, f.fires_at) for f in recorded if f.kind == "shifted") == shifted
    assert sorted(f.slot for f in recorded if f.kind == "excluded") == sorted(
        f.slot for f in inside if f.kind == "excluded"
    )


def test_a_slot_moved_onto_the_day_clocks_spring_forward_is_found_by_its_fire():
    # Saturday March 28, 2026 is a day off; its 02:30 moves FORWARD to Sunday, when 02:30
    # does not exist on Brussels' wall clock: it fires at 03:30 (the DST rule).
    off = Calendar("Ops", ((date(2026, 3, 28), "excluded"),), frozenset())
    table = Filtered(CronTimetable("30 2 * * *", "Europe/Brussels"), [off], Shift.FORWARD,
                     "Europe/Brussels")  # fmt: skip
    sunday = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)  # 03:30 CEST
    assert table.slot_after(datetime(2026, 3, 28, 12, tzinfo=UTC)) == sunday
    saturday = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert {(f.slot, f.kind) for f in table.origins(sunday)} == {
        (saturday, "shifted"),
        (sunday, "fires"),
    }
