"""A schedule's timetable: the slots it fires at, whatever its kind.

:func:`timetable_for` builds one from a schedule's columns: an interval :class:`Grid` (day to
year units on the wall clock of ``time_zone``), a :class:`CronTimetable` or an
:class:`.RRuleTimetable` on that wall clock, or a single slot (:class:`Once`). Every slot
comes back as a UTC instant. (A schedule's calendars wrap it: :func:`.filtered.with_calendars`.)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from django_dsched.enums import ScheduleKind
from django_dsched.exceptions import NoMoreSlots, TimetableError
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.grid import Grid
from django_dsched.timetables.rrule import RRuleTimetable


class Timetable(Protocol):
    def slot_after(self, when: datetime) -> datetime | None: ...

    def slot_at_or_before(self, when: datetime) -> datetime | None: ...

    def slot_at_or_after(self, when: datetime) -> datetime | None: ...

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        """The slot ``steps`` slots before the slot ``latest``, or ``oldest`` (a slot) when
        that would be earlier. Catch-up calls it on every fire, so it never walks the
        slots one by one when it can count them."""
        ...


class Once:
    """A single slot."""

    def __init__(self, at: datetime) -> None:
        self.at = at.astimezone(UTC)

    def slot_after(self, when: datetime) -> datetime | None:
        return self.at if when < self.at else None

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        return self.at if self.at <= when else None

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        return self.at if when <= self.at else None

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        return oldest  # a single slot


class IntervalTimetable:
    """A :class:`~django_dsched.timetables.grid.Grid` whose calendar end means no more slots."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def slot_after(self, when: datetime) -> datetime | None:
        try:
            return self.grid.slot_after(when)
        except NoMoreSlots:
            return None

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        return self.grid.slot_at_or_before(when)

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        try:
            return self.grid.slot_at_or_after(when)
        except NoMoreSlots:
            return None

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        # Slot k is computed from the anchor: no walking, whatever the backlog.
        k = self.grid.index_at_or_before(latest) - steps
        if k < 0:
            return oldest
        try:
            slot = self.grid.slot(k)
        except NoMoreSlots:
            return oldest
        return max(slot, oldest)


def timetable_for(
    kind: str,
    *,
    start: datetime,
    unit: str | None = None,
    every: int | None = None,
    cron: str = "",
    time_zone: str = "UTC",
    rrule: str = "",
) -> Timetable:
    if kind == ScheduleKind.INTERVAL:
        if unit is None or every is None:
            raise TimetableError("an interval schedule needs a frequency unit and count")
        return IntervalTimetable(Grid(unit, every, start, time_zone))
    if kind == ScheduleKind.CRON:
        return CronTimetable(cron, time_zone)
    if kind == ScheduleKind.ONCE:
        return Once(start)
    if kind == ScheduleKind.RRULE:
        # Without DTSTART in the text, the start is DTSTART (on the zone's wall clock).
        return RRuleTimetable(rrule, time_zone, start)
    raise TimetableError(f"unknown schedule kind {kind!r}")
