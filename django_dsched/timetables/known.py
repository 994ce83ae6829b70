"""A timetable whose answers are remembered: what a calendar filter (:mod:`.filtered`) has
learnt of its inner timetable's slots, so that planning one row does not ask the inner
timetable the same thing twice.

Planning a calendar-filtered row asks its filtered timetable where the row goes on from,
its latest due slot, the slot after it, and what became of the slots in between; each of
these asks the inner timetable (a cron, an RRULE, ...) about the same few slots. Every
answer is a fact about the inner timetable's slots: ``slot_after(x) = y`` says that the
span ``(x, y]`` holds exactly one slot, ``y``. :class:`Remembered` keeps these spans
(merged where they touch) and answers from them what they settle, so a row costs about as
many inner searches as a plain row of the same kind.

The inner timetable is immutable, so a fact never goes stale: a calendar edit builds a new
:class:`.Filtered` (the calendars are read per version, firing/calendared.py), and the
facts are about the inner timetable only, never about the calendars.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django_dsched.timetables.timetable import Timetable

MICROSECOND = timedelta(microseconds=1)
# The ends of time, as the spans' bounds: "no slot before" / "no slot after".
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
# The most spans and slots kept (past either, it starts again).
MAX_SPANS = 256
MAX_SLOTS = 20_000


@dataclass(slots=True)
class Span:
    """Every slot from ``low`` to ``high`` (both included): ``slots``, in order."""

    low: datetime
    high: datetime
    slots: list[datetime] = field(default_factory=list)


class Remembered:
    """``inner``'s slots (the :class:`.Timetable` protocol), each search done once."""

    def __init__(self, inner: Timetable) -> None:
        self.inner = inner
        self._spans: list[Span] = []
        self._lows: list[datetime] = []
        self._count = 0

    def slot_after(self, when: datetime) -> datetime | None:
        if when >= LATEST:
            return self.inner.slot_after(when)
        span = self._span_at(when + MICROSECOND)
        if span is not None:
            index = bisect_right(span.slots, when)
            if index < len(span.slots):
                return span.slots[index]
            if span.high == LATEST:
                return None
        found = self.inner.slot_after(when)
        self._learn(when + MICROSECOND, found or LATEST, found)
        return found

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        span = self._span_at(when)
        if span is not None:
            index = bisect_right(span.slots, when)
            if index:
                return span.slots[index - 1]
            if span.low == EARLIEST:
                return None
        elif (known := self._last_known_before(when)) is not None:
            # The latest slot known below ``when``: if the one after it is past ``when``,
            # it is the answer (one search, and the slot after it is known too).
            following = self.slot_after(known)
            if following is None or following > when:
                return known
        found = self.inner.slot_at_or_before(when)
        self._learn(found or EARLIEST, when, found)
        return found

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        span = self._span_at(when)
        if span is not None:
            index = bisect_left(span.slots, when)
            if index < len(span.slots):
                return span.slots[index]
            if span.high == LATEST:
                return None
        if when <= EARLIEST:
            return self.inner.slot_at_or_after(when)
        # The first slot at or after ``when`` is the first one after the microsecond before.
        return self.slot_after(when - MICROSECOND)

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        return self.inner.rewind(latest, steps, oldest)

    # -- the spans --------------------------------------------------------------------------
    def _span_at(self, when: datetime) -> Span | None:
        index = bisect_right(self._lows, when) - 1
        if index >= 0 and self._spans[index].high >= when:
            return self._spans[index]
        return None

    def _last_known_before(self, when: datetime) -> datetime | None:
        """The latest known slot before ``when`` (outside any span holding ``when``)."""
        index = bisect_right(self._lows, when) - 1
        if index >= 0 and self._spans[index].slots:
            return self._spans[index].slots[-1]
        return None

    def _learn(self, low: datetime, high: datetime, slot: datetime | None) -> None:
        """Keep the fact: ``slot`` (or none) is the only slot from ``low`` to ``high``."""
        if len(self._spans) >= MAX_SPANS or self._count >= MAX_SLOTS:
            self._spans.clear()
            self._lows.clear()
            self._count = 0
        # Merge the spans it overlaps or touches: they cover one stretch together, so their
        # slots (disjoint and in order, as the spans are) are every slot in it.
        first = bisect_left([span.high for span in self._spans], _before(low))
        last = first
        slots: list[datetime] = []
        while last < len(self._spans) and self._spans[last].low <= _after(high):
            span = self._spans[last]
            low, high = min(low, span.low), max(high, span.high)
            slots += span.slots
            last += 1
        if slot is not None:
            index = bisect_left(slots, slot)
            if index == len(slots) or slots[index] != slot:
                slots.insert(index, slot)
                self._count += 1
        self._spans[first:last] = [Span(low, high, slots)]
        self._lows[first:last] = [low]


def _after(when: datetime) -> datetime:
    return when if when >= LATEST else when + MICROSECOND


def _before(when: datetime) -> datetime:
    return when if when <= EARLIEST else when - MICROSECOND


__all__ = ["Remembered"]
