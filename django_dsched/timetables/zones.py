"""Wall clocks of IANA time zones, and the one DST rule every timetable uses.

A wall time becomes an instant like this (the same for cron and for day-to-year intervals):

* **Gap** (spring forward): a wall time that does not exist is read with the offset in force
  before the gap, so it lands just past the gap (02:30 on the day clocks jump 02:00 -> 03:00
  is 03:30 new time).
* **Fold** (fall back): a wall time that occurs twice means its first occurrence.

Nothing here reads Django's current time zone: a timetable's arithmetic happens on UTC
instants or on the wall clock of the zone the schedule names, never on whatever zone a
datetime happened to arrive in (the admin's form gives times in the user's zone).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_dsched.exceptions import CronError

# Zones whose offset never changes, by their definition in the tz database: in these, a
# day on the wall clock is always 24 hours, so day and week intervals are exact durations.
FIXED_OFFSET_ZONES = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "UCT",
        "Etc/UCT",
        "GMT",
        "Etc/GMT",
        "GMT0",
        "Etc/GMT0",
        "GMT+0",
        "GMT-0",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "Greenwich",
        "Etc/Greenwich",
        "Universal",
        "Etc/Universal",
        "Zulu",
        "Etc/Zulu",
        *(f"Etc/GMT+{hours}" for hours in range(1, 13)),
        *(f"Etc/GMT-{hours}" for hours in range(1, 15)),
    }
)


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; :class:`CronError` when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"unknown time zone {name!r}") from exc


def has_fixed_offset(name: str) -> bool:
    """Whether ``name``'s wall clock never jumps (a wall day is always 24 hours)."""
    return name in FIXED_OFFSET_ZONES


def wall(when: datetime, tz: ZoneInfo) -> datetime:
    """``when`` on ``tz``'s wall clock, as a naive datetime."""
    return when.astimezone(tz).replace(tzinfo=None)


def instant(wall_time: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of a wall time in ``tz``, by the rule in this module's docstring.

    ``fold=0`` does both halves of the rule: a repeated wall time means its first
    occurrence, and a missing one is read with the offset before the gap.
    """
    return wall_time.replace(tzinfo=tz, fold=0).astimezone(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
# The first and last whole days (since the epoch) a datetime can hold in any zone.
FIRST_DAY = (datetime(1, 1, 2, tzinfo=UTC) - EPOCH) // DAY
LAST_DAY = (datetime(9999, 12, 30, tzinfo=UTC) - EPOCH) // DAY


def offset(when: datetime, tz: ZoneInfo) -> timedelta:
    """``tz``'s UTC offset at the instant ``when``."""
    return when.astimezone(tz).utcoffset() or timedelta(0)


@lru_cache(maxsize=8192)
def _jump_around_day(tz: ZoneInfo, day: int) -> timedelta:
    """How far the zone's UTC offset moves between day ``day - 2`` and day ``day + 3``
    (days since the epoch, UTC): zero when there is no transition near that day."""
    offsets = [
        (EPOCH + DAY * (day + shift)).astimezone(tz).utcoffset() or timedelta(0)
        for shift in (-2, -1, 0, 1, 2, 3)
        if FIRST_DAY <= day + shift <= LAST_DAY  # next to year 1 or 9999: the days there are
    ]
    return max(offsets) - min(offsets)


def jump_near(when: datetime, tz: ZoneInfo) -> timedelta:
    """The size of any offset change within two days of ``when`` (zero: none)."""
    return _jump_around_day(tz, (when - EPOCH) // DAY)


def offsets_near(when: datetime, tz: ZoneInfo) -> tuple[timedelta, timedelta]:
    """The smallest and largest offsets within two jumps of ``when``.

    Wall times and instants are out of order only within one jump of a gap, so this
    window is all a search around ``when`` needs; away from any transition it is the one
    offset in force, which keeps a search next to a DST change as short as anywhere else.
    """
    jump = jump_near(when, tz)
    if not jump:
        here = offset(when, tz)
        return here, here
    offsets = [offset(when + jump * k, tz) for k in (-2, -1, 0, 1, 2)]
    return min(offsets), max(offsets)


# How finely :func:`changes_between` looks for an offset change before it pins one down
# (no zone changes its offset twice within this).
PROBE = timedelta(minutes=15)
MICROSECOND = timedelta(microseconds=1)


def changes_between(
    low: datetime, high: datetime, tz: ZoneInfo
) -> list[tuple[datetime, timedelta, timedelta]]:
    """``tz``'s offset changes in ``(low, high]`` (at most two days), in order: the first
    instant of each new offset, the offset before and the one after. Nothing near a change
    costs one cached look-up (:func:`jump_near`)."""
    if high <= low or (not jump_near(low, tz) and not jump_near(high, tz)):
        return []
    found = []
    before, moment = offset(low, tz), low
    while moment < high:
        probe = min(moment + PROBE, high)
        after = offset(probe, tz)
        if after != before:
            lo, hi = moment, probe  # the offset is ``before`` at lo, ``after`` at hi
            while hi - lo > MICROSECOND:
                middle = lo + (hi - lo) // 2
                lo, hi = (middle, hi) if offset(middle, tz) == before else (lo, middle)
            found.append((hi, before, after))
            before = after
        moment = probe
    return found


def as_utc(wall_time: datetime, at_offset: timedelta) -> datetime:
    """A naive wall time read with a given offset (a bound, not the rule: see
    :func:`instant`)."""
    return wall_time.replace(tzinfo=UTC) - at_offset
