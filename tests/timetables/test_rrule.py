"""RRULE timetables against an independent oracle, across DST transitions.

The oracle walks python-dateutil's own expansion of the rule from DTSTART (naive wall
times, its plain iteration: no windows, no jumps) and turns each wall time into an instant
by brute force: the UTC minutes whose wall time it is (first occurrence), or, for a time
in a gap, the instant read with the offset before the gap (as the cron oracle does).
"""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from django_dsched.exceptions import RecurrenceError, ValidationError
from django_dsched.timetables.rrule import RRuleTimetable, check_recurrence, validate_recurrence

# (zone, a wall time a few days before one of its 2026 transitions)
ZONES = [
    ("America/New_York", datetime(2026, 3, 6)),
    ("America/New_York", datetime(2026, 10, 29)),
    ("Europe/Brussels", datetime(2026, 3, 27)),
    ("Europe/Brussels", datetime(2026, 10, 23)),
    ("Australia/Lord_Howe", datetime(2026, 4, 2)),  # 30-minute shift
    ("UTC", datetime(2026, 1, 30)),
]
WEEKDAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


# Cached: it is a function of its arguments alone, and the examples share their zones' weeks.
@functools.cache
def oracle_instant(naive: datetime, zone_name: str) -> datetime:
    """The DST rule in its plainest form: of the instants whose wall time is ``naive``
    (tried with every offset the zone has within a day), the first; in a gap (none), the
    wall time read with the offset in force a day before."""
    zone = ZoneInfo(zone_name)
    around = naive.replace(tzinfo=UTC)
    offsets = {
        (around + timedelta(minutes=15 * k)).astimezone(zone).utcoffset() for k in range(-96, 97)
    }
    matches = [
        around - offset
        for offset in offsets
        if offset is not None and (around - offset).astimezone(zone).replace(tzinfo=None) == naive
    ]
    if matches:
        return min(matches)
    before = (around - timedelta(days=1)).astimezone(zone).utcoffset()
    assert before is not None
    return around - before


def oracle(text: str, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    rule = rrulestr(text, forceset=True)  # dateutil's own parser and expansion
    slots = set()
    for naive in rule:
        if naive > end.replace(tzinfo=None) + timedelta(days=2):
            break
        # A wall time's instant is its wall time read with one of the zone's offsets, each
        # less than a day (Python's rule for utcoffset): two days before start, it is before
        # start. Every wall time from DTSTART is still expanded (COUNT counts them all).
        if naive < start.replace(tzinfo=None) - timedelta(days=2):
            continue
        moment = oracle_instant(naive, zone_name)
        if start < moment <= end:
            slots.add(moment)
    return sorted(slots)


def walk(table: RRuleTimetable, start: datetime, end: datetime) -> list[datetime]:
    slots, moment = [], start
    while True:
        moment = table.slot_after(moment)
        if moment is None or moment > end:
            return slots
        slots.append(moment)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S")


@st.composite
def rules(draw: st.DrawFn) -> tuple[str, str, datetime]:
    zone_name, near = draw(st.sampled_from(ZONES))
    freq = draw(st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY"]))
    dtstart = near - timedelta(
        days=draw(st.integers(0, 40 if freq in ("HOURLY", "MINUTELY") else 400)),
        hours=draw(st.integers(0, 23)),
        minutes=draw(st.sampled_from([0, 15, 30])),
    )
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.sampled_from([1, 1, 2, 3]))}"]
    if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
        parts.append(f"BYMONTHDAY={draw(st.sampled_from(['-1', '1,15', '31', '-2,-1', '29']))}")
    elif freq in ("MONTHLY", "YEARLY", "WEEKLY", "DAILY") and draw(st.booleans()):
        days = draw(st.lists(st.sampled_from(WEEKDAYS), min_size=1, max_size=5, unique=True))
        numbered = freq in ("MONTHLY",) and draw(st.booleans())
        parts.append(
            "BYDAY="
            + ",".join(f"{draw(st.sampled_from([1, 2, -1]))}{d}" if numbered else d for d in days)
        )
    if freq == "YEARLY" and draw(st.booleans()):
        if draw(st.booleans()):
            parts.append(f"BYWEEKNO={draw(st.sampled_from(['1', '20', '52,53', '-1', '1,2']))}")
            if not any(p.startswith("BYMONTHDAY") for p in parts) and "BYDAY" not in ";".join(
                parts
            ):
                parts.append("BYDAY=MO,FR")
        else:
            parts.append(f"BYMONTH={draw(st.sampled_from(['2', '3,10', '11', '1,4,7,10']))}")
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY"):
        parts.append(f"BYHOUR={draw(st.sampled_from(['1', '2', '9,17', '0,2,3', '2,22']))}")
        parts.append(f"BYMINUTE={draw(st.sampled_from(['0', '30', '0,30']))}")
    elif freq == "HOURLY":
        parts.append(f"BYMINUTE={draw(st.sampled_from(['0', '30', '0,20,40']))}")
    else:
        parts.append(f"BYHOUR={draw(st.sampled_from(['1,2,3', '0,1,2', '2']))}")
        parts.append(f"BYMINUTE={draw(st.sampled_from(['0,15,30,45', '10,50']))}")
    if draw(st.booleans()) and len(parts) > 2:
        parts.append(f"BYSETPOS={draw(st.sampled_from(['1', '-1', '2,-2']))}")
    end_choice = draw(st.sampled_from(["none", "count", "until"]))
    if end_choice == "count":
        parts.append(f"COUNT={draw(st.integers(1, 60))}")
    elif end_choice == "until":
        parts.append(f"UNTIL={_stamp(near + timedelta(days=draw(st.integers(-5, 8))))}")
    lines = [f"DTSTART:{_stamp(dtstart)}", "RRULE:" + ";".join(parts)]
    if draw(st.booleans()):
        excluded = [near + timedelta(days=2, hours=2), near.replace(hour=9) + timedelta(days=3)]
        lines.append("EXDATE:" + ",".join(map(_stamp, excluded)))
    if draw(st.booleans()):
        lines.append(f"RDATE:{_stamp(near + timedelta(days=1, hours=2, minutes=30))}")
    return "\n".join(lines), zone_name, near


def _usable(text: str) -> bool:
    try:
        next(iter(rrulestr(text, forceset=True)), None)
    except ValueError:
        return False  # dateutil refuses it (an empty BYxxx for the interval)
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=rules())
def test_matches_the_oracle_across_transitions(case):
    text, zone_name, near = case
    note(f"{zone_name}\n{text}")
    try:
        check_recurrence(text, zone_name)
    except RecurrenceError:
        return  # refused, or never fires: dateutil would walk to year 9999 (tested below)
    if not _usable(text):
        return
    table = RRuleTimetable(text, zone_name)
    zone = ZoneInfo(zone_name)
    start = (near - timedelta(days=2)).replace(tzinfo=zone).astimezone(UTC)
    end = start + timedelta(days=9)
    slots = walk(table, start, end)
    assert slots == oracle(text, zone_name, start, end)
    assert all(a < b for a, b in itertools.pairwise(slots))
    # Backwards, the same slots.
    for earlier, later in itertools.pairwise(slots):
        assert table.slot_at_or_before(later - timedelta(microseconds=1)) == earlier
        assert table.slot_at_or_after(later) == later
    if len(slots) > 3:
        assert table.rewind(slots[-1], 3, start) == slots[-4]
        assert table.rewind(slots[-1], len(slots) + 5, start) == start


def test_month_end_and_last_weekday_far_from_dtstart():
    # DTSTART decades back: the search starts in the period that holds the time asked about.
    last_day = RRuleTimetable("DTSTART:19600131T170000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=-1", "UTC")
    assert last_day.slot_after(datetime(2028, 2, 1, tzinfo=UTC)) == datetime(
        2028, 2, 29, 17, tzinfo=UTC
    )
    last_weekday = RRuleTimetable(
        "DTSTART:19600101T170000\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", "UTC"
    )
    assert last_weekday.slot_after(datetime(2026, 5, 1, tzinfo=UTC)) == datetime(
        2026, 5, 29, 17, tzinfo=UTC
    )  # May 31 is a Sunday


def test_every_second_tuesday_keeps_its_phase():
    table = RRuleTimetable("DTSTART:20000104T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=TU", "UTC")
    slot = table.slot_after(datetime(2026, 6, 1, tzinfo=UTC))
    assert slot is not None and slot.weekday() == 1
    assert ((slot.date() - datetime(2000, 1, 4).date()).days // 7) % 2 == 0


def test_spring_forward_and_fall_back():
    spring = RRuleTimetable("DTSTART:20260301T023000\nRRULE:FREQ=DAILY", "America/New_York")
    assert spring.slot_after(datetime(2026, 3, 7, 12, tzinfo=UTC)) == datetime(
        2026, 3, 8, 7, 30, tzinfo=UTC
    )  # 02:30 does not exist: 03:30 EDT
    fall = RRuleTimetable("DTSTART:20261001T013000\nRRULE:FREQ=DAILY", "America/New_York")
    first = fall.slot_after(datetime(2026, 10, 31, 12, tzinfo=UTC))
    assert first == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # the first 01:30 (EDT)
    assert fall.slot_after(first) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)


def test_a_rule_without_dtstart_takes_the_schedule_start():
    start = datetime(2026, 1, 5, 8, tzinfo=UTC)
    table = RRuleTimetable("FREQ=DAILY;COUNT=3", "Europe/Brussels", start)
    assert walk(table, start - timedelta(days=1), start + timedelta(days=9)) == [
        start + timedelta(days=k) for k in range(3)
    ]


def test_sparse_and_ended_rules_answer_quickly():
    # dateutil itself walks to year 9999 on these (seconds): here, a bounded search.
    ended = RRuleTimetable(
        "DTSTART:20260101T000000\nRRULE:FREQ=MINUTELY;UNTIL=20260102T000000", "UTC"
    )
    assert ended.slot_after(datetime(2030, 1, 1, tzinfo=UTC)) is None
    leap = RRuleTimetable(
        "DTSTART:20000101T090000\nRRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", "UTC"
    )
    assert leap.slot_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2044, 2, 29, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("FREQ=DAILY;BYFOO=1", "BYFOO is not an RRULE part"),
        ("FREQ=DAILY;SKIP=FORWARD", "calendar"),
        ("FREQ=FORTNIGHTLY", "is not one of"),
        ("FREQ=DAILY;COUNT=3;UNTIL=20300101T000000Z", "COUNT and UNTIL"),
        ("FREQ=SECONDLY;BYSECOND=60", "leap second"),
        ("FREQ=SECONDLY;INTERVAL=0", "out of range"),
        ("FREQ=WEEKLY;BYDAY=1MO", "numbered weekday"),
        ("FREQ=MONTHLY;BYWEEKNO=3", "BYWEEKNO cannot be used"),
        ("FREQ=WEEKLY;BYMONTHDAY=3", "BYMONTHDAY cannot be used"),
        ("FREQ=DAILY;BYSETPOS=1", "BYSETPOS needs"),
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31", "never fires"),
        ("DTSTART:20260101T000000\nRRULE:FREQ=DAILY;UNTIL=20251231T000000", "before DTSTART"),
        ("FREQ=DAILY;COUNT=100001", "out of range"),
        ("FREQ=YEARLY;INTERVAL=101", "out of range"),
        ("DTSTART:20260101T000000.5\nRRULE:FREQ=DAILY", "YYYYMMDDTHHMMSS"),
        ("EXRULE:FREQ=DAILY\nRRULE:FREQ=DAILY", "EXRULE"),
        ("", "empty"),
    ],
)
def test_what_cannot_be_honoured_is_refused(text, fragment):
    with pytest.raises(RecurrenceError, match=fragment):
        check_recurrence(text)
    with pytest.raises(ValidationError) as caught:
        validate_recurrence(text)
    assert caught.value.code == "invalid_rrule"


def test_a_tzid_must_be_the_schedule_zone():
    text = "DTSTART;TZID=Europe/Brussels:20260101T090000\nRRULE:FREQ=DAILY"
    assert RRuleTimetable(text, "Europe/Brussels").slot_after(
        datetime(2026, 1, 1, tzinfo=UTC)
    ) == datetime(2026, 1, 1, 8, tzinfo=UTC)
    with pytest.raises(RecurrenceError, match="TZID"):
        RRuleTimetable(text, "America/New_York")
