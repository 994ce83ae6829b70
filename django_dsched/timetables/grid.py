"""Where an interval schedule's slots fall.

A schedule's slots form a grid anchored on ``start_ts``: slot 0 is the anchor and every
slot is computed from the anchor, never from the previous slot or from the time a fire
actually ran, so the grid never drifts. Which calendar a unit steps is one declared rule:

* ``SECONDS``, ``MINUTES``, ``HOURS`` are absolute durations on the UTC timeline: slot *k*
  is ``start + k·period``, whatever the time zone.
* ``DAYS``, ``WEEKS``, ``MONTHS``, ``YEARS`` step the wall clock of the schedule's
  ``time_zone`` (default UTC) from the anchor's wall time: a daily schedule anchored at
  09:00 in Australia/Sydney fires at 09:00 there all year. Months and years add *k* whole
  months to the anchor, so an anchor on January 31 gives February 28 (29), March 31,
  April 30, ... and never drifts to the 28th. A wall time that does not exist (spring
  forward) shifts past the gap; one that occurs twice (fall back) means its first
  occurrence: the same rule as cron (:mod:`.zones`).

In UTC (or any zone whose offset never changes) a day is 24 hours, so day and week grids
are exact durations there; :func:`due_slot_us` uses plain integers for those and for the
absolute units. This module is the only place that knows the grid; the fire path, the admin
and the API all call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from dateutil.relativedelta import relativedelta

from django_dsched.enums import FrequencyUnit
from django_dsched.exceptions import NoMoreSlots, TimetableError
from django_dsched.timetables.zones import FIXED_OFFSET_ZONES, has_fixed_offset, instant, wall, zone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

# Units that are durations on the UTC timeline.
ABSOLUTE_UNITS: dict[str, timedelta] = {
    FrequencyUnit.SECONDS: timedelta(seconds=1),
    FrequencyUnit.MINUTES: timedelta(minutes=1),
    FrequencyUnit.HOURS: timedelta(hours=1),
}
# Units that step the zone's wall clock by whole days.
DAYS_PER_UNIT: dict[str, int] = {FrequencyUnit.DAYS: 1, FrequencyUnit.WEEKS: 7}
# Units that step the zone's wall clock by whole months.
MONTHS_PER_UNIT: dict[str, int] = {FrequencyUnit.MONTHS: 1, FrequencyUnit.YEARS: 12}
# The nominal length of the units shorter than a month (exact in UTC).
FIXED_UNITS: dict[str, timedelta] = {
    **ABSOLUTE_UNITS,
    **{unit: timedelta(days=days) for unit, days in DAYS_PER_UNIT.items()},
}

# The longest period accepted: a schedule must fire at least once a century.
MAX_PERIOD = timedelta(days=36525)


def exact_period(unit: str, time_zone: str) -> timedelta | None:
    """The unit's length when a step of it is always that long, else None (a day in a zone
    with DST, a month, a year)."""
    period = ABSOLUTE_UNITS.get(unit)
    if period is None and has_fixed_offset(time_zone):
        days = DAYS_PER_UNIT.get(unit)
        period = None if days is None else timedelta(days=days)
    return period


@dataclass(frozen=True, slots=True)
class Grid:
    unit: str
    every: int
    start: datetime
    time_zone: str = "UTC"
    # Derived: the period when it is a fixed duration, else the zone and the anchor's wall
    # time, from which calendar steps are taken.
    _period: timedelta | None = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _anchor: datetime = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.unit not in FIXED_UNITS and self.unit not in MONTHS_PER_UNIT:
            raise TimetableError(f"unknown frequency unit {self.unit!r}")
        if self.every < 1:
            raise TimetableError("the frequency must be a positive whole number")
        if self.start.tzinfo is None or self.start.utcoffset() is None:
            raise TimetableError("the start time must be timezone-aware")
        tz = zone(self.time_zone)
        # The anchor as a UTC instant, whatever zone it arrived in: arithmetic on a
        # datetime carrying another zone would step that zone's wall clock.
        start = self.start.astimezone(UTC)
        period = exact_period(self.unit, self.time_zone)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "_period", None if period is None else period * self.every)
        object.__setattr__(self, "_zone", tz)
        object.__setattr__(self, "_anchor", wall(start, tz))

    def slot(self, k: int) -> datetime:
        """Slot number ``k`` (``k = 0`` is the anchor)."""
        try:
            if self._period is not None:
                return self.start + self._period * k
            if k == 0:
                return self.start
            months = MONTHS_PER_UNIT.get(self.unit)
            if months is not None:
                step: timedelta | relativedelta = relativedelta(months=months * self.every * k)
            else:
                step = timedelta(days=DAYS_PER_UNIT[self.unit] * self.every * k)
            return instant(self._anchor + step, self._zone)
        except (OverflowError, ValueError) as exc:
            raise NoMoreSlots(str(exc)) from None

    def index_at_or_before(self, when: datetime) -> int:
        """The number of the latest slot at or before ``when`` (negative before the anchor,
        for fixed periods)."""
        if self._period is not None:
            return (when - self.start) // self._period
        there = wall(when, self._zone)
        months = MONTHS_PER_UNIT.get(self.unit)
        if months is not None:
            elapsed = (there.year - self._anchor.year) * 12 + (there.month - self._anchor.month)
            k = elapsed // (months * self.every)
        else:
            k = (there - self._anchor) // timedelta(days=DAYS_PER_UNIT[self.unit] * self.every)
        # The wall-clock estimate is off by at most a step either way (day and time of day,
        # and offsets that differ by less than a day); slots never go backwards.
        k = max(k, 0)
        while k > 0 and self.slot(k) > when:
            k -= 1
        while self._fits(k + 1, when):
            k += 1
        return k

    def _fits(self, k: int, when: datetime) -> bool:
        try:
            return self.slot(k) <= when
        except NoMoreSlots:
            return False

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        if when < self.start:
            return None
        return self.slot(self.index_at_or_before(when))

    def slot_after(self, when: datetime) -> datetime:
        """The first slot strictly after ``when``."""
        if when < self.start:
            return self.start
        return self.slot(self.index_at_or_before(when) + 1)

    def slot_at_or_after(self, when: datetime) -> datetime:
        """The first slot at or after ``when``."""
        if when <= self.start:
            return self.start
        k = self.index_at_or_before(when)
        slot = self.slot(k)
        return slot if slot == when else self.slot(k + 1)


def period_is_acceptable(unit: str, every: int) -> bool:
    """Whether one period of ``every`` ``unit`` is no longer than :data:`MAX_PERIOD`."""
    fixed = FIXED_UNITS.get(unit)
    if fixed is not None:
        return every <= MAX_PERIOD // fixed
    return MONTHS_PER_UNIT[unit] * every <= 1200


def due_slot(grid: Grid, next_run: datetime, now: datetime) -> tuple[datetime, datetime | None]:
    """The slot to fire now and the schedule's next run after it.

    A schedule due at ``next_run`` (``<= now``) fires once: for the latest slot of its grid
    that is not after ``now`` (the missed run after downtime, coalesced), never for a slot
    before ``next_run``. The next run is the first grid slot after the fired one, so lateness
    never shifts the grid; it is None when the grid has no later slot.
    """
    latest = grid.slot_at_or_before(now)
    slot = latest if latest is not None and latest > next_run else next_run
    try:
        return slot, grid.slot_after(slot)
    except NoMoreSlots:
        return slot, None


ABSOLUTE_UNIT_MICROSECONDS: dict[str, int] = {
    unit: length // MICROSECOND for unit, length in ABSOLUTE_UNITS.items()
}
DAY_UNIT_MICROSECONDS: dict[str, int] = {
    unit: days * 86_400_000_000 for unit, days in DAYS_PER_UNIT.items()
}


def to_microseconds(when: datetime) -> int:
    return (when - EPOCH) // MICROSECOND


def from_microseconds(us: int) -> datetime:
    return EPOCH + MICROSECOND * us


def due_slot_us(
    unit: str, every: int, start: int, next_run: int, now: int, time_zone: str = "UTC"
) -> tuple[int, int | None]:
    """:func:`due_slot` on microseconds since the epoch: the fire path's fast path.

    Units whose step is an exact duration (seconds to hours; days and weeks in a zone whose
    offset never changes, such as UTC) are plain integer arithmetic on the same grid; the
    others go through :class:`Grid`. Equal to :func:`due_slot` for every input (a property
    test checks it, in several zones). The fire path passes ``now`` less the backlog window
    (:func:`.misfire.backlog_window`): a plain ``COALESCE`` row coalesces only the slots due
    that long, as :func:`.misfire.decide` does (another property test walks both).
    """
    unit_us = ABSOLUTE_UNIT_MICROSECONDS.get(unit)
    if unit_us is None and time_zone in FIXED_OFFSET_ZONES:
        unit_us = DAY_UNIT_MICROSECONDS.get(unit)
    if unit_us is None or every < 1:
        slot_at, after = due_slot(
            Grid(unit, every, from_microseconds(start), time_zone),
            from_microseconds(next_run),
            from_microseconds(now),
        )
        return to_microseconds(slot_at), None if after is None else to_microseconds(after)
    period = unit_us * every
    if now >= start:
        latest = start + (now - start) // period * period
        slot = latest if latest > next_run else next_run
    else:
        slot = next_run
    if slot < start:
        return slot, start
    following = start + ((slot - start) // period + 1) * period
    if following > MAX_MICROSECONDS:
        return slot, None
    return slot, following


# datetime.max as microseconds since the epoch: the grid ends there.
MAX_MICROSECONDS = (datetime.max.replace(tzinfo=UTC) - EPOCH) // MICROSECOND
