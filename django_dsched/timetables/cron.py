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

import re
from datetime import UTC, datetime, timedelta

from croniter import CroniterBadDateError, croniter

from django_dsched.exceptions import CronError
from django_dsched.timetables.zones import instant, wall, zone

__all__ = ["CronTimetable", "check_expression", "zone"]

# Matches scanned before a search gives up (a fold can hide up to an hour of matches of a
# every-second expression, which is 3,600).
MAX_STEPS = 10_000
SECOND = timedelta(seconds=1)

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
SYNTAX = (
    "use numbers, *, ranges (a-b), steps (/n) and lists (a,b); month and weekday names "
    "(JAN, MON) in their fields"
)


def check_expression(expression: str) -> None:
    """Raise :class:`CronError` unless ``expression`` is five or six valid fields, in the
    documented syntax."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise CronError(
            "a cron expression has five fields (minute hour day month weekday), "
            "or six with seconds last"
        )
    for name, text in zip(FIELDS, fields, strict=False):
        pattern = TERMS.get(name, NUMERIC_TERM)
        for term in text.split(","):
            if not pattern.fullmatch(term):
                raise CronError(
                    f"{text!r} is not supported in the {name} field: {SYNTAX} "
                    "(croniter's extensions such as R, H, L, W, # and ? are not)"
                )
    if not croniter.is_valid(expression):
        raise CronError(f"{expression!r} is not a valid cron expression")


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

    def _offsets(self, when: datetime) -> tuple[timedelta, timedelta]:
        """The smallest and largest UTC offsets of the zone within two days of ``when``."""
        offsets = [
            (when + timedelta(days=days)).astimezone(self.zone).utcoffset() or timedelta(0)
            for days in (-2, -1, 0, 1, 2)
        ]
        return min(offsets), max(offsets)

    @staticmethod
    def _as_utc(wall_time: datetime, offset: timedelta) -> datetime:
        return wall_time.replace(tzinfo=UTC) - offset

    def slot_after(self, when: datetime) -> datetime | None:
        """The first fire strictly after ``when``; None if it never fires again.

        Wall times and instants are not in the same order around a gap (a missing wall time
        lands after the gap), so the search starts back by the size of any nearby jump and
        keeps the earliest instant after ``when``, until no later wall time can beat it.
        """
        low, high = self._offsets(when)
        matches = croniter(self.expression, self._wall(when) - (high - low))
        best: datetime | None = None
        try:
            for _ in range(MAX_STEPS):
                naive = matches.get_next(datetime)
                if best is not None and self._as_utc(naive, high) > best:
                    return best
                instant = self._instant(naive)
                if instant > when and (best is None or instant < best):
                    best = instant
        except (CroniterBadDateError, OverflowError, ValueError):
            return best
        raise CronError(f"{self.expression!r}: no fire found after {when}")

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        """The latest fire at or before ``when``; None if there is none (mirror of
        :meth:`slot_after`)."""
        low, high = self._offsets(when)
        start = self._wall(when) + (high - low) + timedelta(microseconds=1)
        matches = croniter(self.expression, start)
        best: datetime | None = None
        try:
            for _ in range(MAX_STEPS):
                naive = matches.get_prev(datetime)
                if best is not None and self._as_utc(naive, low) < best:
                    return best
                instant = self._instant(naive)
                if instant <= when and (best is None or instant > best):
                    best = instant
        except (CroniterBadDateError, OverflowError, ValueError):
            return best
        raise CronError(f"{self.expression!r}: no fire found before {when}")

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        latest = self.slot_at_or_before(when)
        if latest is not None and latest == when:
            return latest
        return self.slot_after(when)
