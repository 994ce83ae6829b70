"""Cron timetables in an IANA time zone, with a written-down DST rule.

Cron expressions are evaluated on the zone's wall clock (croniter does the matching), and
each matching wall time becomes one instant:

* **Gap** (spring forward): a wall time that does not exist fires once, at the instant the
  same wall time would have had with the offset in force before the gap (02:30 on the day
  clocks jump 02:00 -> 03:00 fires at 03:30 new time). An instant that a real wall time
  also maps to fires once, not twice.
* **Fold** (fall back): a wall time that occurs twice fires once, at its first occurrence;
  the repeated hour's second pass fires nothing.

So every fire is a distinct instant, fires are strictly increasing, and each local slot
fires at most once.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta
from functools import lru_cache

from croniter import CroniterBadDateError, croniter

from django_dsched.exceptions import CronError
from django_dsched.timetables.zones import (
    as_utc,
    instant,
    jump_near,
    offset,
    offsets_near,
    wall,
    zone,
)

__all__ = ["CronTimetable", "check_expression", "zone"]

# Matches scanned before a search gives up (a fold can hide up to an hour of matches of a
# every-second expression, which is 3,600).
MAX_STEPS = 10_000
SECOND = timedelta(seconds=1)
MICROSECOND = timedelta(microseconds=1)
DAY = timedelta(days=1)

# The syntax the documentation promises, field by field: numbers, ``*``, ranges ``a-b``,
# steps ``/n`` and lists ``,``; names of months and weekdays in their fields. croniter
# accepts more (``R`` random, ``H`` hashed, ``L``, ``W``, ``#``, ``?``, ``@daily``): random
# values make fires erratic and previews wrong, and the others are not promised, so they
# are refused rather than half-supported.
FIELDS = ("minute", "hour", "day of month", "month", "day of week", "second")
MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
WEEKDAYS = "SUN|MON|TUE|WED|THU|FRI|SAT"


def _term(value: str) -> re.Pattern[str]:
    return re.compile(rf"(\*|(?:{value})(?:-(?:{value}))?)(?:/[0-9]+)?", re.IGNORECASE)


TERMS = {
    "month": _term(rf"[0-9]+|{MONTHS}"),
    "day of week": _term(rf"[0-9]+|{WEEKDAYS}"),
}
NUMERIC_TERM = _term("[0-9]+")
# Each field's numbers (day of week: 0 and 7 are Sunday).
RANGES = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day of month": (1, 31),
    "month": (1, 12),
    "day of week": (0, 7),
    "second": (0, 59),
}
NUMBER = re.compile(r"(?<![/0-9])[0-9]+")
SYNTAX = (
    "use numbers, *, ranges (a-b), steps (/n) and lists (a,b); month and weekday names "
    "(JAN, MON) in their fields"
)


@lru_cache(maxsize=4096)
def check_expression(expression: str) -> None:
    """Raise :class:`CronError` unless ``expression`` is five or six valid fields, in the
    documented syntax.

    Cached (a refusal is not): the fire path builds a timetable per due row, and parsing
    the expression again costs as much as a search."""
    fields = expression.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        raise CronError(
            f"{fields[0]!r} is a croniter extension, which is not supported: write the five "
            "fields (for @daily, '0 0 * * *')"
        )
    if len(fields) not in (5, 6):
        raise CronError(
            "a cron expression has five fields (minute hour day month weekday), "
            f"or six with seconds last; {expression!r} has {len(fields)}"
        )
    for name, text in zip(FIELDS, fields, strict=False):
        pattern = TERMS.get(name, NUMERIC_TERM)
        for term in text.split(","):
            if not pattern.fullmatch(term):
                raise CronError(
                    f"{text!r} is not supported in the {name} field: {SYNTAX} "
                    "(croniter's extensions such as R, H, L, W, # and ? are not)"
                )
            low, high = RANGES[name]
            for number in NUMBER.findall(term):
                if not low <= int(number) <= high:
                    raise CronError(
                        f"{number} is out of range in the {name} field of {expression!r}: "
                        f"it takes {low} to {high}"
                    )
    if not croniter.is_valid(expression):
        raise CronError(f"{expression!r} is not a valid cron expression")


# Catch-up starts already found: (expression, zone, steps) -> (latest, start), where
# ``start`` is the slot ``steps`` slots before ``latest``. Each entry is a fact about the
# timetable alone, so schedules sharing an expression share it and a stale entry is never
# wrong, only older; the next catch-up fire moves it on by the few slots since.
_REWOUND: dict[tuple[str, str, int], tuple[datetime, datetime]] = {}
_REWOUND_MAX = 4096


@lru_cache(maxsize=1024)
def _most_per_unit(expression: str) -> tuple[int, int, int]:
    """The most fires an expression can have in one minute, hour and day of wall time."""
    fields, _nth = croniter.expand(expression)

    def size(index: int, everything: int) -> int:
        values = fields[index]
        return everything if "*" in values else len(values)

    per_minute = size(5, 60) if len(fields) == 6 else 1
    per_hour = per_minute * size(0, 60)
    return per_minute, per_hour, per_hour * size(1, 24)


@lru_cache(maxsize=4096)
def _parsed(expression: str) -> croniter:
    """``expression`` parsed by croniter, once per process: parsing costs several times a
    search, and a calendar-filtered row searches its cron several times."""
    return croniter(expression, datetime(2000, 1, 1))


def _matches(expression: str, start: datetime) -> croniter:
    """A croniter of ``expression`` from the naive wall time ``start`` (a copy of the parsed
    one: iterating changes only the copy's own position)."""
    matches = copy.copy(_parsed(expression))
    matches.set_current(start, force=True)
    return matches


class CronTimetable:
    """The instants a cron expression matches in a time zone."""

    def __init__(self, expression: str, time_zone: str = "UTC") -> None:
        check_expression(expression)
        self.expression = expression
        self.zone = zone(time_zone)

    def _wall(self, when: datetime) -> datetime:
        return wall(when, self.zone)

    def _instant(self, wall_time: datetime) -> datetime:
        return instant(wall_time, self.zone)

    def _offset(self, instant: datetime) -> timedelta:
        return offset(instant, self.zone)

    def _jump(self, instant: datetime) -> timedelta:
        """The size of any offset change within two days of ``instant`` (zero: none)."""
        return jump_near(instant, self.zone)

    def _offsets_near(self, instant: datetime) -> tuple[timedelta, timedelta]:
        """The smallest and largest offsets within two jumps of ``instant``
        (:func:`.zones.offsets_near`)."""
        return offsets_near(instant, self.zone)

    _as_utc = staticmethod(as_utc)

    def slot_after(self, when: datetime) -> datetime | None:
        """The first fire strictly after ``when``; None if it never fires again.

        Wall times and instants are not in the same order around a gap (a missing wall time
        lands after the gap), so the search starts back by the size of a gap just passed
        and keeps the earliest instant after ``when``, until no later wall time can beat it.
        """
        # Only a gap behind ``when`` holds wall times that land after it, and only while
        # ``when`` is within one jump of it (a gap's wall times land within a jump after it).
        start = self._wall(when)
        jump = self._jump(when)
        if jump:
            start -= max(timedelta(0), self._offset(when) - self._offset(when - jump))
        matches = _matches(self.expression, start)
        best: datetime | None = None
        high = timedelta(0)  # with ``best``: the largest offset near it
        try:
            for _ in range(MAX_STEPS):
                naive = matches.get_next(datetime)
                if best is not None and self._as_utc(naive, high) > best:
                    return best
                instant = self._instant(naive)
                if instant > when and (best is None or instant < best):
                    best = instant
                    if self._wall(best) == naive:
                        # A wall time that exists (not in a gap): every later wall time
                        # lands at or after it, since only a gap's wall times land after
                        # later ones. The usual case.
                        return best
                    # A wall time in a gap, landing after it: a later wall time beats it
                    # until they are read past it even at the largest offset near it.
                    high = self._offsets_near(best)[1]
        except (CroniterBadDateError, OverflowError, ValueError):
            return best
        raise CronError(f"{self.expression!r}: no fire found after {when}")

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        """The latest fire at or before ``when``; None if there is none (mirror of
        :meth:`slot_after`)."""
        low, high = self._offsets_near(when)
        # Only a fold (the repeated hour) holds later wall times that land before ``when``.
        start = self._wall(when) + max(timedelta(0), high - self._offset(when)) + MICROSECOND
        matches = _matches(self.expression, start)
        best: datetime | None = None
        try:
            for _ in range(MAX_STEPS):
                naive = matches.get_prev(datetime)
                if best is not None and self._as_utc(naive, low) < best:
                    return best
                instant = self._instant(naive)
                if instant <= when and (best is None or instant > best):
                    best = instant
                    low = self._offsets_near(best)[0]
                    if self._as_utc(naive, low) <= best:
                        return best  # every earlier wall time lands earlier: the usual case
        except (CroniterBadDateError, OverflowError, ValueError):
            return best
        raise CronError(f"{self.expression!r}: no fire found before {when}")

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        latest = self.slot_at_or_before(when)
        if latest is not None and latest == when:
            return latest
        return self.slot_after(when)

    # -- catch-up ---------------------------------------------------------------------------
    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        """The slot ``steps`` slots before the slot ``latest``, or ``oldest`` when that
        would be earlier (the start of a catch-up of at most ``steps + 1`` slots).

        Most calls cost O(1): when the expression cannot fit more than ``steps + 1`` fires
        between ``oldest`` and ``latest`` (a bound from its fields), the answer is
        ``oldest``. Otherwise the slot is found by walking back from ``latest``, once; the
        walk is remembered, so the catch-up's later fires only step over the slots that
        came due since.
        """
        if steps <= 0:
            return latest
        if latest <= oldest or self._most_fires(oldest, latest) <= steps + 1:
            return oldest
        key = (self.expression, self.zone.key, steps)
        known = _REWOUND.get(key)
        start = None if known is None else self._move_on(known, latest, steps)
        if start is None:
            start = self._walk_back(latest, steps)
        if len(_REWOUND) >= _REWOUND_MAX:
            _REWOUND.clear()
        if start is not None:
            _REWOUND[key] = (latest, start)
        return oldest if start is None or start <= oldest else start

    def _most_fires(self, oldest: datetime, latest: datetime) -> int:
        """An upper bound of the fires in ``[oldest, latest]``, from the fields alone."""
        per_minute, per_hour, per_day = _most_per_unit(self.expression)
        # The wall-clock span, widened by any nearby jump (gap times land after the gap).
        span = self._wall(latest) - self._wall(oldest) + self._jump(oldest) + self._jump(latest)
        return min(
            (span // timedelta(minutes=1) + 2) * per_minute,
            (span // timedelta(hours=1) + 2) * per_hour,
            (span // DAY + 2) * per_day,
        )

    def _quiet(self, instant: datetime) -> bool:
        """No offset change within two jumps of ``instant``: wall order is instant order."""
        low, high = self._offsets_near(instant)
        return low == high

    def _walk_back(self, latest: datetime, steps: int) -> datetime | None:
        """The slot ``steps`` slots before ``latest``; None if the timetable has fewer."""
        slot = latest
        matches = None
        for _ in range(steps):
            earlier: datetime | None = None
            if self._quiet(slot):
                if matches is None:
                    matches = _matches(self.expression, self._wall(slot))
                try:
                    earlier = self._instant(matches.get_prev(datetime))
                except (CroniterBadDateError, OverflowError, ValueError):
                    return None
                if not self._quiet(earlier):
                    earlier, matches = None, None
            if earlier is None:
                matches = None  # near a transition: the careful search, one slot at a time
                earlier = self.slot_at_or_before(slot - MICROSECOND)
                if earlier is None:
                    return None
            slot = earlier
        return slot

    def _move_on(
        self, known: tuple[datetime, datetime], latest: datetime, steps: int
    ) -> datetime | None:
        """Move a remembered (latest, start) pair on to ``latest``: as many slots as came
        after the remembered latest. None when it cannot help (older, or too far)."""
        was_latest, start = known
        if was_latest > latest:
            return None
        slot, moved = was_latest, 0
        while True:
            after = self.slot_after(slot)
            if after is None or after > latest:
                break
            slot, moved = after, moved + 1
            if moved > steps:
                return None
        if slot != latest:
            return None  # ``latest`` is not a slot after the remembered one
        for _ in range(moved):
            after = self.slot_after(start)
            if after is None:
                return None
            start = after
        return start
