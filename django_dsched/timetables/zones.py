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

from datetime import UTC, datetime
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
