"""Reading a recurrence: RFC 5545's RRULE with DTSTART, RDATE and EXDATE, as text.

The text is one ``FREQ=...`` rule, or content lines (one per line)::

    DTSTART:20260106T090000
    RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=TU
    EXDATE:20261229T090000
    RDATE:20261230T090000

Date-times without ``Z`` are wall times in the schedule's time zone (a ``TZID`` parameter
must name that zone); with ``Z`` they are UTC instants. A date alone (``20261229``) is
midnight, and an UNTIL date includes that whole day. Without DTSTART the schedule's start,
on its zone's wall clock, is DTSTART.

:func:`parse` checks everything that does not depend on the zone or the start (every part
known, in range and allowed with the frequency; nothing sub-second can be written);
:func:`.rrule.check_recurrence` then checks that the rule fires at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from functools import lru_cache

from django_dsched.exceptions import RecurrenceError
from django_dsched.timetables.expand import (
    DAILY,
    FREQUENCIES,
    HOURLY,
    MINUTELY,
    MONTHLY,
    SECONDLY,
    WEEKLY,
    YEARLY,
)

WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
# The most occurrences COUNT may ask for: COUNT's last occurrence is found once, by
# walking the rule from DTSTART (for more, use the schedule's max_fires).
MAX_COUNT = 10_000
# The most RDATE and EXDATE values a recurrence may list.
MAX_DATES = 1000
# The longest INTERVAL per frequency: a period of at most a century, the longest an
# interval schedule may have.
MAX_INTERVAL = {
    YEARLY: 100,
    MONTHLY: 1200,
    WEEKLY: 5218,
    DAILY: 36525,
    HOURLY: 36525 * 24,
    MINUTELY: 36525 * 1440,
    SECONDLY: 36525 * 86400,
}
# Each BYxxx list part: its range of values (0 is never allowed where negatives are).
RANGES = {
    "BYSECOND": (0, 59),
    "BYMINUTE": (0, 59),
    "BYHOUR": (0, 23),
    "BYMONTH": (1, 12),
    "BYMONTHDAY": (-31, 31),
    "BYYEARDAY": (-366, 366),
    "BYWEEKNO": (-53, 53),
    "BYSETPOS": (-366, 366),
}
PARTS = frozenset({"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "WKST", *RANGES})
# What RFC 5545's table allows with each frequency (others are refused).
NOT_WITH = {
    "BYMONTHDAY": {WEEKLY},
    "BYYEARDAY": {DAILY, WEEKLY, MONTHLY},
    "BYWEEKNO": {MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY, SECONDLY},
}
KNOWN_ELSEWHERE = {
    "RSCALE": "RFC 7529's RSCALE is not supported (rules use the Gregorian calendar)",
    "SKIP": "RFC 7529's SKIP is not supported: filter the schedule by a calendar with "
    "BACKWARD or FORWARD to move slots",
    "BYEASTER": "BYEASTER is a python-dateutil extension, not RFC 5545",
}
DATE_TIME = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})(Z?))?\Z")
PROPERTY = re.compile(r"[A-Za-z-]+[;:]")  # a content line; anything else is a bare rule
BYDAY = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)\Z")


@dataclass(frozen=True, slots=True)
class When:
    """A date-time as written: a wall time (``utc`` false) or a UTC instant."""

    at: datetime  # naive
    utc: bool = False
    whole_day: bool = False  # a date without a time


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A parsed recurrence, before its zone and start are known."""

    freq: int
    interval: int = 1
    count: int | None = None
    until: When | None = None
    wkst: int = 0
    lists: tuple[tuple[str, tuple[int, ...]], ...] = ()  # ("BYMONTH", (1, 7)), ...
    byday: tuple[tuple[int, int], ...] = ()  # (weekday, n); n = 0: every such weekday
    dtstart: When | None = None
    zone_name: str | None = None  # DTSTART's, RDATE's or EXDATE's TZID, if any
    rdates: tuple[When, ...] = ()
    exdates: tuple[When, ...] = ()

    def part(self, name: str) -> tuple[int, ...] | None:
        for key, values in self.lists:
            if key == name:
                return values
        return None


def _date_time(text: str, what: str, date_only: bool = False) -> When:
    match = DATE_TIME.match(text.strip().upper())
    if match is None or (date_only and match.group(4) is not None):
        kind = "a date (YYYYMMDD)" if date_only else "YYYYMMDDTHHMMSS, with Z for UTC"
        raise RecurrenceError(f"{what} {text!r} is not {kind}")
    year, month, day, hour, minute, second, utc = match.groups()
    try:
        at = datetime(int(year), int(month), int(day))
        if hour is not None:
            at = at.replace(hour=int(hour), minute=int(minute), second=int(second))
    except ValueError as exc:
        raise RecurrenceError(f"{what} {text!r} is not a valid date-time: {exc}") from None
    if not 1900 <= at.year < 9000:
        raise RecurrenceError(f"{what} {text!r} is outside the years 1900 to 8999")
    return When(at, utc=bool(utc), whole_day=hour is None)


def _integer(name: str, text: str, low: int, high: int) -> int:
    if not re.fullmatch(r"[+-]?\d{1,10}", text):
        raise RecurrenceError(f"{name}={text!r} is not a whole number")
    value = int(text)
    if not low <= value <= high or value == 0:
        raise RecurrenceError(f"{name}={value} is out of range: it takes {low} to {high}")
    return value


def _list(name: str, text: str) -> tuple[int, ...]:
    low, high = RANGES[name]
    if name == "BYSECOND" and text.strip() == "60":
        raise RecurrenceError("BYSECOND=60 (a leap second) never comes on the clocks schedules use")
    values = []
    for item in text.split(","):
        if not re.fullmatch(r"[+-]?\d{1,3}", item):
            raise RecurrenceError(f"{name}: {item!r} is not a whole number")
        value = int(item)
        if not low <= value <= high or (value == 0 and low < 0):
            zero = ", not 0" if low < 0 else ""
            raise RecurrenceError(
                f"{name}: {value} is out of range: it takes {low} to {high}{zero}"
            )
        values.append(value)
    return tuple(sorted(set(values)))


def _byday(
    text: str, freq: int, has_bymonth: bool, has_byweekno: bool
) -> tuple[tuple[int, int], ...]:
    days = []
    for item in text.split(","):
        match = BYDAY.match(item.strip().upper())
        if match is None:
            raise RecurrenceError(f"BYDAY: {item!r} is not a weekday (MO..SU, optionally +n/-n)")
        n = int(match.group(1) or 0)
        if match.group(1) is not None:
            if freq not in (MONTHLY, YEARLY) or has_byweekno:
                raise RecurrenceError(
                    f"BYDAY={item}: a numbered weekday needs FREQ=MONTHLY or YEARLY "
                    "(and no BYWEEKNO) (RFC 5545)"
                )
            top = 5 if freq == MONTHLY or has_bymonth else 53
            if n == 0 or abs(n) > top:
                raise RecurrenceError(f"BYDAY={item}: the number takes 1 to {top} or -{top} to -1")
        days.append((WEEKDAYS.index(match.group(2)), n))
    return tuple(sorted(set(days)))


def _split_rule(text: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for item in text.strip().rstrip(";").split(";"):
        name, sep, value = item.partition("=")
        name = name.strip().upper()
        if not sep or not value.strip():
            raise RecurrenceError(f"{item!r} is not NAME=VALUE")
        if name in parts:
            raise RecurrenceError(f"{name} appears twice")
        if name not in PARTS:
            raise RecurrenceError(KNOWN_ELSEWHERE.get(name, f"{name} is not an RRULE part"))
        parts[name] = value.strip()
    return parts


def _rule(text: str) -> Recurrence:
    """The RRULE part of a recurrence (without DTSTART, RDATE, EXDATE)."""
    parts = _split_rule(text)
    if "FREQ" not in parts:
        raise RecurrenceError("the rule has no FREQ (YEARLY, MONTHLY, WEEKLY, DAILY, ...)")
    freq_name = parts["FREQ"].upper()
    if freq_name not in FREQUENCIES:
        raise RecurrenceError(f"FREQ={freq_name} is not one of {', '.join(FREQUENCIES)}")
    freq = FREQUENCIES.index(freq_name)
    interval = 1
    if "INTERVAL" in parts:
        interval = _integer("INTERVAL", parts["INTERVAL"], 1, MAX_INTERVAL[freq])
    count = None
    if "COUNT" in parts:
        count = _integer("COUNT", parts["COUNT"], 1, MAX_COUNT)
    until = None
    if "UNTIL" in parts:
        if count is not None:
            raise RecurrenceError("COUNT and UNTIL cannot both be given (RFC 5545)")
        until = _date_time(parts["UNTIL"], "UNTIL")
    lists = tuple((name, _list(name, parts[name])) for name in RANGES if name in parts)
    for name, _values in lists:
        if freq in NOT_WITH.get(name, ()):
            raise RecurrenceError(f"{name} cannot be used with FREQ={freq_name} (RFC 5545)")
    byday: tuple[tuple[int, int], ...] = ()
    if "BYDAY" in parts:
        byday = _byday(parts["BYDAY"], freq, "BYMONTH" in parts, "BYWEEKNO" in parts)
    if "BYSETPOS" in parts and len(lists) + bool(byday) < 2:
        raise RecurrenceError("BYSETPOS needs another BYxxx part to pick from (RFC 5545)")
    wkst = 0
    if "WKST" in parts:
        if parts["WKST"].upper() not in WEEKDAYS:
            raise RecurrenceError(f"WKST={parts['WKST']!r} is not a weekday (MO..SU)")
        wkst = WEEKDAYS.index(parts["WKST"].upper())
    return Recurrence(freq, interval, count, until, wkst, lists, byday)


def _property(line: str) -> tuple[str, dict[str, str], str]:
    head, sep, value = line.partition(":")
    if not sep:
        raise RecurrenceError(f"{line!r} is not NAME:VALUE (or a FREQ=... rule)")
    name, *params = head.split(";")
    parameters = {}
    for param in params:
        key, eq, val = param.partition("=")
        if not eq:
            raise RecurrenceError(f"{line!r}: parameter {param!r} is not NAME=VALUE")
        parameters[key.strip().upper()] = val.strip()
    return name.strip().upper(), parameters, value.strip()


def _dates(name: str, params: dict[str, str], value: str) -> list[When]:
    kind = params.pop("VALUE", "DATE-TIME").upper()
    params.pop("TZID", None)
    if params:
        raise RecurrenceError(f"{name}: parameter {next(iter(params))} is not supported")
    if kind not in ("DATE", "DATE-TIME"):
        raise RecurrenceError(f"{name}: VALUE={kind} is not supported (DATE or DATE-TIME)")
    return [_date_time(item, name, date_only=kind == "DATE") for item in value.split(",")]


@lru_cache(maxsize=4096)
def parse(text: str) -> Recurrence:
    """The recurrence ``text`` says; :class:`RecurrenceError` when it says something that
    cannot be honoured. Cached (a refusal is not)."""
    if not isinstance(text, str) or not text.strip():
        raise RecurrenceError("the recurrence is empty: give an RRULE such as FREQ=DAILY")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line if PROPERTY.match(line) else f"RRULE:{line}" for line in lines]
    rule: Recurrence | None = None
    found: dict[str, list[When]] = {"DTSTART": [], "RDATE": [], "EXDATE": []}
    zones: set[str] = set()
    for line in lines:
        name, params, value = _property(line)
        if name == "RRULE":
            if rule is not None:
                raise RecurrenceError("only one RRULE is supported")
            if params:
                raise RecurrenceError("RRULE takes no parameters")
            rule = _rule(value)
        elif name in found:
            if "TZID" in params:
                zones.add(params["TZID"])
            found[name].extend(_dates(name, params, value))
        elif name == "EXRULE":
            raise RecurrenceError("EXRULE is deprecated by RFC 5545 and not supported: use EXDATE")
        else:
            raise RecurrenceError(f"{name} is not supported (DTSTART, RRULE, RDATE, EXDATE)")
    if rule is None:
        raise RecurrenceError("the recurrence has no RRULE")
    return _complete(rule, found, zones)


def _complete(rule: Recurrence, found: dict[str, list[When]], zones: set[str]) -> Recurrence:
    if len(found["DTSTART"]) > 1:
        raise RecurrenceError("DTSTART is given more than once")
    if len(zones) > 1:
        raise RecurrenceError(f"the recurrence names several zones ({', '.join(sorted(zones))})")
    if len(found["RDATE"]) + len(found["EXDATE"]) > MAX_DATES:
        raise RecurrenceError(f"at most {MAX_DATES} RDATE and EXDATE values")
    dtstart = found["DTSTART"][0] if found["DTSTART"] else None
    until = rule.until
    if until is not None and until.whole_day:
        until = When(datetime.combine(until.at.date(), time(23, 59, 59)), until.utc)
    if (
        dtstart is not None
        and until is not None
        and until.utc == dtstart.utc
        and until.at < dtstart.at
    ):
        raise RecurrenceError(
            f"UNTIL {until.at:%Y-%m-%d %H:%M:%S} is before DTSTART: the rule never fires"
        )
    return Recurrence(
        rule.freq,
        rule.interval,
        rule.count,
        until,
        rule.wkst,
        rule.lists,
        rule.byday,
        dtstart,
        next(iter(zones), None),
        tuple(found["RDATE"]),
        tuple(found["EXDATE"]),
    )


__all__ = ["MAX_COUNT", "Recurrence", "When", "parse"]
