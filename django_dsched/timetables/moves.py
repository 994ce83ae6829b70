"""Where a slot lands when a calendar moves it to another day at the same wall-clock time
(:mod:`.filtered`'s ``BACKWARD`` / ``FORWARD``), worked out from the zone's offsets instead
of slot by slot.

A slot of day ``source`` with wall time ``T`` moves to the instant of ``T`` on day
``business`` (by the DST rule of :mod:`.zones`). On a day whose offset does not change,
that is one to one and in order; next to a DST change it is not (a gap's wall times land
after the gap, a fold's repeat), which is why a search there used to step through a
window of slots one at a time: a per-minute cron's whole hour, each step a search of the
cron. Here the wall clock of a day is at most two straight pieces (one offset change), so
the wall times whose move lands past (or at or before) an instant are computed, and a
search jumps to the first slot that can qualify: a few searches whatever the frequency.
A day with more than one change near it (none in today's tz database) is not worked
out: the caller steps one slot, as before.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from django_dsched.timetables.zones import changes_between, instant, offset, wall

MICROSECOND = timedelta(microseconds=1)
DAY = timedelta(days=1)
# How far past a day's ends a change can still move its wall times (wider than any jump).
REACH = timedelta(hours=3)
# A day's wall clock: its offset, or (offset before, first wall time read with the offset
# after, offset after) around its one change; None: more than one change, not worked out.
Clock = tuple[timedelta, datetime | None, timedelta] | None


@lru_cache(maxsize=4096)
def clock(day: date, tz: ZoneInfo) -> Clock:
    """How ``day``'s wall times become instants: ``T - before`` up to the wall time
    ``turn`` (``fold=0``: a gap's wall times, and a fold's first pass, read with the offset
    before), ``T - after`` from it on."""
    start = instant(datetime.combine(day, time()), tz)
    end = instant(datetime.combine(day + DAY, time()), tz)
    changes = changes_between(start - REACH, end + REACH, tz)
    if not changes:
        return offset(start, tz), None, offset(start, tz)
    if len(changes) > 1 or abs(changes[0][2] - changes[0][1]) >= REACH:
        return None
    at, before, after = changes[0]
    turn = (at + before).replace(tzinfo=None) + max(timedelta(0), after - before)
    return before, turn, after


def first_past(business: date, when: datetime, after: datetime, tz: ZoneInfo) -> datetime | None:
    """The earliest wall time later than ``after`` (a naive wall time on ``business``)
    whose instant on ``business`` is after ``when``; None when no wall time of that day is.
    Raises :class:`LookupError` for a day not worked out."""
    found = clock(business, tz)
    if found is None:
        raise LookupError(business)
    before, turn, later = found
    moment = when.astimezone(UTC).replace(tzinfo=None)
    best = max(after + MICROSECOND, moment + later + MICROSECOND)
    if turn is not None:
        best = max(best, turn)
        early = max(after + MICROSECOND, moment + before + MICROSECOND)
        if early < turn:
            best = min(best, early)
    return best if best.date() == business else None


def last_upto(business: date, when: datetime, before: datetime, tz: ZoneInfo) -> datetime | None:
    """The latest wall time earlier than ``before`` (a naive wall time on ``business``)
    whose instant on ``business`` is at or before ``when``; None when none is. Raises
    :class:`LookupError` for a day not worked out."""
    found = clock(business, tz)
    if found is None:
        raise LookupError(business)
    first, turn, later = found
    moment = when.astimezone(UTC).replace(tzinfo=None)
    candidates = []
    best = min(before - MICROSECOND, moment + later)
    if turn is None or best >= turn:
        candidates.append(best)
    if turn is not None:
        candidates.append(min(before - MICROSECOND, moment + first, turn - MICROSECOND))
    found_at = max(candidates)
    return found_at if found_at.date() == business else None


def skip_forward(
    slot: datetime, source: date, business: date, when: datetime, tz: ZoneInfo
) -> datetime | None:
    """An instant after ``slot`` (a slot of ``source`` whose move to ``business`` lands at or
    before ``when``) before which no slot of ``source`` lands after ``when``: the next
    wall time that does, on ``slot``'s piece of the day (or the piece's end). None: not
    worked out (step one slot)."""
    here = wall(slot, tz)
    try:
        target = first_past(business, when, datetime.combine(business, here.time()), tz)
    except LookupError:
        return None
    aim = datetime.combine(source + DAY, time()) if target is None else (
        datetime.combine(source, target.time())
    )  # fmt: skip
    at = (aim - (here - slot.replace(tzinfo=None))).replace(tzinfo=UTC)
    changes = changes_between(slot, at, tz)
    return changes[0][0] if changes else at


def skip_back(
    slot: datetime, source: date, business: date, when: datetime, tz: ZoneInfo
) -> datetime | None:
    """Mirror of :func:`skip_forward`: an instant before ``slot`` (whose move lands after
    ``when``) after which no slot of ``source`` lands at or before ``when``."""
    here = wall(slot, tz)
    try:
        target = last_upto(business, when, datetime.combine(business, here.time()), tz)
    except LookupError:
        return None
    aim = datetime.combine(source, time()) - MICROSECOND if target is None else (
        datetime.combine(source, target.time())
    )  # fmt: skip
    at = (aim - (here - slot.replace(tzinfo=None))).replace(tzinfo=UTC)
    changes = changes_between(at, slot, tz)
    return changes[-1][0] - MICROSECOND if changes else at


def landing(slot: datetime, source: date, business: date, tz: ZoneInfo) -> list[datetime]:
    """The instants of ``source`` whose wall time moved to ``business`` is ``slot``, in
    order (none, one, or two in a fold). Raises :class:`LookupError` for a day not worked
    out."""
    there, here = clock(business, tz), clock(source, tz)
    if there is None or here is None:
        raise LookupError(business if there is None else source)
    moment = slot.astimezone(UTC).replace(tzinfo=None)
    found = set()
    for shift in {there[0], there[2]}:
        clock_time = (moment + shift).time()
        if instant(datetime.combine(business, clock_time), tz) != slot:
            continue
        aim = datetime.combine(source, clock_time)
        for own in {here[0], here[2]}:
            candidate = (aim - own).replace(tzinfo=UTC)
            if wall(candidate, tz) == aim:
                found.add(candidate)
    return sorted(found)


__all__ = ["clock", "first_past", "landing", "last_upto", "skip_back", "skip_forward"]
