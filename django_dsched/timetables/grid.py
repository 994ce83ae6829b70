"""Where an interval schedule's slots fall.

A schedule's slots form a grid anchored on ``start_ts``: slot *k* is ``start_ts + k·period``.
Fixed units (seconds to weeks) are exact durations. Calendar units (months, years) add *k*
whole months to the anchor, so a schedule anchored on January 31 fires on February 28 (29),
March 31, April 30, ... and never drifts to the 28th: each slot is computed from the anchor,
never from the previous slot or from the time a fire actually ran.

This module is the only place that knows the grid; the fire path, the admin and the API all
call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dateutil.relativedelta import relativedelta

from django_dsched.enums import FrequencyUnit
from django_dsched.exceptions import NoMoreSlots, TimetableError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

FIXED_UNITS: dict[str, timedelta] = {
    FrequencyUnit.SECONDS: timedelta(seconds=1),
    FrequencyUnit.MINUTES: timedelta(minutes=1),
    FrequencyUnit.HOURS: timedelta(hours=1),
    FrequencyUnit.DAYS: timedelta(days=1),
    FrequencyUnit.WEEKS: timedelta(weeks=1),
}
MONTHS_PER_UNIT: dict[str, int] = {FrequencyUnit.MONTHS: 1, FrequencyUnit.YEARS: 12}

# The longest period accepted: a schedule must fire at least once a century.
MAX_PERIOD = timedelta(days=36525)


@dataclass(frozen=True, slots=True)
class Grid:
    unit: str
    every: int
    start: datetime

    def __post_init__(self) -> None:
        if self.unit not in FIXED_UNITS and self.unit not in MONTHS_PER_UNIT:
            raise TimetableError(f"unknown frequency unit {self.unit!r}")
        if self.every < 1:
            raise TimetableError("the frequency must be a positive whole number")
        if self.start.tzinfo is None:
            raise TimetableError("the start time must be timezone-aware")

    def slot(self, k: int) -> datetime:
        """Slot number ``k`` (``k = 0`` is the anchor)."""
        try:
            fixed = FIXED_UNITS.get(self.unit)
            if fixed is not None:
                return self.start + fixed * (self.every * k)
            months = MONTHS_PER_UNIT[self.unit] * self.every * k
            return self.start + relativedelta(months=months)
        except (OverflowError, ValueError) as exc:
            raise NoMoreSlots(str(exc)) from None

    def index_at_or_before(self, when: datetime) -> int:
        """The number of the latest slot at or before ``when`` (negative before the anchor)."""
        fixed = FIXED_UNITS.get(self.unit)
        if fixed is not None:
            return (when - self.start) // (fixed * self.every)
        step = MONTHS_PER_UNIT[self.unit] * self.every
        months = (when.year - self.start.year) * 12 + (when.month - self.start.month)
        k = months // step
        # The month estimate is off by at most one step either way (day and time of day).
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


FIXED_UNIT_MICROSECONDS: dict[str, int] = {
    unit: length // MICROSECOND for unit, length in FIXED_UNITS.items()
}


def to_microseconds(when: datetime) -> int:
    return (when - EPOCH) // MICROSECOND


def from_microseconds(us: int) -> datetime:
    return EPOCH + MICROSECOND * us


def due_slot_us(
    unit: str, every: int, start: int, next_run: int, now: int
) -> tuple[int, int | None]:
    """:func:`due_slot` on microseconds since the epoch: the fire path's fast path.

    Fixed units are plain integer arithmetic on the same grid; calendar units go through
    :class:`Grid`. Equal to :func:`due_slot` for every input (a property test checks it).
    """
    unit_us = FIXED_UNIT_MICROSECONDS.get(unit)
    if unit_us is None or every < 1:
        slot_at, after = due_slot(
            Grid(unit, every, from_microseconds(start)),
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
