"""Cron timetables against an independent brute-force oracle, across DST transitions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched.timetables.cron import CronError, CronTimetable

# (zone, a UTC instant a day before one of its 2026 transitions)
TRANSITIONS = [
    ("America/New_York", datetime(2026, 3, 7, 12, tzinfo=UTC)),  # 02:00 -> 03:00
    ("America/New_York", datetime(2026, 10, 31, 12, tzinfo=UTC)),  # 02:00 -> 01:00
    ("Europe/Berlin", datetime(2026, 3, 28, 12, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 24, 12, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 12, tzinfo=UTC)),  # 30-minute shift
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 12, tzinfo=UTC)),
    ("Europe/Dublin", datetime(2026, 3, 28, 12, tzinfo=UTC)),  # negative DST in tzdata
    ("UTC", datetime(2026, 3, 7, 12, tzinfo=UTC)),
]

# The fields the properties draw.
MINUTES = ["*/5", "0", "30", "15,45", "*/20", "0,30", "59"]
HOURS = ["*", "1", "2", "3", "1-3", "0,2", "*/2"]
DAYS = ["*", "*/2"]
expressions = st.builds(
    lambda m, h, d: f"{m} {h} {d} * *",
    st.sampled_from(MINUTES),
    st.sampled_from(HOURS),
    st.sampled_from(DAYS),
)


def values(spec: str, low: int, high: int) -> frozenset[int]:
    """The values one cron field allows (``*``, ``a``, ``a-b``, each with ``/step``, listed
    with ``,``): read here by hand, so the oracle does not share croniter's reading."""
    allowed: set[int] = set()
    for part in spec.split(","):
        body, _, step = part.partition("/")
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first, last = (int(bound) for bound in body.split("-"))
        else:
            first = last = int(body)
        allowed.update(range(first, last + 1, int(step or 1)))
    return frozenset(allowed)


def oracle(expression: str, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """Every minute in (start, end], checked one by one: the rule in its plainest form."""
    zone = ZoneInfo(zone_name)
    minute, hour, day, month, weekday = expression.split()
    assert (month, weekday) == ("*", "*"), "the oracle reads minutes, hours and days only"
    minutes_, hours_, days_ = values(minute, 0, 59), values(hour, 0, 23), values(day, 1, 31)

    def matches(wall: datetime) -> bool:
        return wall.minute in minutes_ and wall.hour in hours_ and wall.day in days_

    fires = set()
    step = timedelta(minutes=1)
    instant = start + step
    while instant <= end:
        wall = instant.astimezone(zone)
        if wall.fold == 0 and matches(wall):
            fires.add(instant)  # a wall time's first (or only) occurrence
        instant += step
    naive = start.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    naive_end = end.astimezone(zone).replace(tzinfo=None) + timedelta(hours=3)
    while naive <= naive_end:
        there = naive.replace(tzinfo=zone).astimezone(UTC)
        missing = there.astimezone(zone).replace(tzinfo=None) != naive
        if missing and matches(naive) and start < there <= end:
            fires.add(there)  # a wall time inside a gap: once, shifted past the gap
        naive += step
    return sorted(fires)


def test_the_oracle_reads_every_field_the_properties_draw_as_croniter_does():
    """Each field spec the properties draw, alone (the others ``*``), at every value of its
    field: the oracle's reading agrees with croniter.match (a match is the three together)."""
    cases = [
        *(
            (f"{spec} * * * *", datetime(2026, 1, 1, 5, n), 0)
            for spec in MINUTES
            for n in range(60)
        ),
        *((f"* {spec} * * *", datetime(2026, 1, 1, n, 7), 1) for spec in HOURS for n in range(24)),
        *(
            (f"* * {spec} * *", datetime(2026, 1, n, 5, 7), 2)
            for spec in DAYS
            for n in range(1, 32)
        ),
    ]
    for expression, at, field in cases:
        spec = expression.split()[field]
        allowed = values(spec, *((0, 59), (0, 23), (1, 31))[field])
        mine = (at.minute, at.hour, at.day)[field] in allowed
        assert mine == croniter.match(expression, at), (expression, at)


def run(table: CronTimetable, start: datetime, end: datetime) -> list[datetime]:
    fires, instant = [], start
    while True:
        instant = table.slot_after(instant)
        if instant is None or instant > end:
            return fires
        fires.append(instant)


@settings(max_examples=200, deadline=None)  # the oracle is cheap: many draws
@given(expression=expressions, case=st.sampled_from(TRANSITIONS))
def test_matches_the_oracle_across_transitions(expression, case):
    zone_name, start = case
    end = start + timedelta(hours=36)
    fires = run(CronTimetable(expression, zone_name), start, end)
    assert fires == oracle(expression, zone_name, start, end)
    assert all(a < b for a, b in itertools.pairwise(fires))


@settings(max_examples=50, deadline=None)
@given(
    expression=expressions,
    case=st.sampled_from(TRANSITIONS),
    offset=st.integers(0, 36 * 60),
)
def test_latest_slot_and_next_slot_bracket_any_instant(expression, case, offset):
    zone_name, start = case
    table = CronTimetable(expression, zone_name)
    when = start + timedelta(minutes=offset, seconds=17)
    before, after = table.slot_at_or_before(when), table.slot_after(when)
    assert before is not None and after is not None
    assert before <= when < after
    assert table.slot_after(before) == after


def test_spring_forward_fires_the_missing_time_once_after_the_gap():
    table = CronTimetable("30 2 * * *", "America/New_York")
    fire = table.slot_after(datetime(2026, 3, 7, 12, tzinfo=UTC))
    assert fire == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)  # 03:30 EDT
    assert table.slot_after(fire) == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)


def test_fall_back_fires_the_repeated_time_once():
    table = CronTimetable("30 1 * * *", "America/New_York")
    fire = table.slot_after(datetime(2026, 10, 31, 12, tzinfo=UTC))
    assert fire == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # the first 01:30 (EDT)
    assert table.slot_after(fire) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)


def test_seconds_field():
    table = CronTimetable("* * * * * */20", "UTC")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert run(table, start, start + timedelta(minutes=1)) == [
        start + timedelta(seconds=s) for s in (20, 40, 60)
    ]


@pytest.mark.parametrize(
    ("expression", "zone", "fragment"),
    [
        ("61 * * * *", "UTC", "out of range in the minute field"),
        ("* * *", "UTC", "five fields"),
        ("not cron", "UTC", "five fields"),
        ("0 0 * * *", "Mars/Olympus", "unknown time zone"),
    ],
)
def test_bad_definitions_are_refused(expression, zone, fragment):
    with pytest.raises(CronError, match=fragment):
        CronTimetable(expression, zone)


def test_an_impossible_date_never_fires():
    table = CronTimetable("0 0 30 2 *", "UTC")
    assert table.slot_after(datetime(2026, 1, 1, tzinfo=UTC)) is None


def test_a_half_hour_gap_interleaves_shifted_and_real_times():
    # Lord Howe jumps 02:00 -> 02:30: 02:00 and 02:20 do not exist and land at 02:30 and
    # 02:50, between the real 02:40 and 03:00.
    table = CronTimetable("*/20 * * * *", "Australia/Lord_Howe")
    utc = [datetime(2026, 10, 3, 15, m, tzinfo=UTC) for m in (30, 40, 50)]
    assert run(table, datetime(2026, 10, 3, 15, 20, tzinfo=UTC), utc[-1]) == utc
    assert table.slot_at_or_before(datetime(2026, 10, 3, 15, 55, tzinfo=UTC)) == utc[-1]
