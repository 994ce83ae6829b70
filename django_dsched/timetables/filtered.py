"""A timetable filtered by calendars: slots on days off are dropped or moved, slots in a
blackout window are dropped, and each slot's fate can be told.

The policy names follow RFC 7529's SKIP:

* ``OMIT``: a slot on a day that is not a business day (in any of the filter's calendars)
  is dropped: "excluded by <calendar> (holiday: Christmas Day)".
* ``BACKWARD`` / ``FORWARD``: it moves to the previous / next business day, at the same
  wall-clock time of day (in the schedule's zone, resolved by the DST rule of
  :mod:`.zones`): "shifted from <slot> by <calendar> (weekend)". A slot that finds no
  business day within :data:`MAX_SHIFT_DAYS` is dropped.

Whatever the policy, a slot (moved or not) inside one of the calendars' blackout windows is
dropped ("excluded by <calendar> (blackout: release freeze)"): a freeze means no run. Two
slots that land on the same instant fire once. Filters with different policies nest
(``Filtered(Filtered(table, [holidays], FORWARD), [freeze], OMIT)``).

:meth:`Filtered.fates` lists each planned slot with its fate (:class:`Fate`), for the
preview, the audit and the metrics; :meth:`Filtered.origins` tells which planned slots fire
at a given slot (itself, or moved onto it), and :func:`fates_to_record` what a plan that
moved a schedule on passed by (what the fire path records). The :class:`.Timetable` methods
give the slots that fire, so the fire path, the preview and edits all see the same ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from typing import Any, TypeVar, cast

from django_dsched.exceptions import CalendarError
from django_dsched.timetables import moves
from django_dsched.timetables.calendars import Calendar
from django_dsched.timetables.known import Remembered
from django_dsched.timetables.timetable import Timetable
from django_dsched.timetables.zones import instant, jump_near, offset, wall, zone

MICROSECOND = timedelta(microseconds=1)
DAY = timedelta(days=1)
# How far a slot may move to reach a business day.
MAX_SHIFT_DAYS = 31
# How many dropped slots or days off a search passes before it gives up (no more slots).
MAX_SKIPS = 5000
# The most slots :meth:`Filtered.fates` lists.
MAX_FATES = 10_000
# The most slots :meth:`Filtered.origins` looks at per day next to a DST change, on a day
# whose clock :mod:`.moves` does not work out (more than one change near it).
MAX_LANDING = 16
# The most answers a filter keeps (past it, it starts again).
MAX_ANSWERS = 4096
T = TypeVar("T")


class Shift(StrEnum):
    OMIT = "OMIT"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"


@dataclass(frozen=True, slots=True)
class Fate:
    """What became of a planned slot: it fires at ``fires_at`` (itself, or moved), or it
    was dropped (``fires_at`` None); ``calendar`` and ``reason`` say by what."""

    slot: datetime
    fires_at: datetime | None
    calendar: str = ""
    reason: str = ""

    @property
    def kind(self) -> str:
        if self.fires_at is None:
            return "excluded"
        return "shifted" if self.fires_at != self.slot else "fires"

    def describe(self) -> str:
        if self.fires_at is None:
            return f"excluded by {self.calendar} ({self.reason})"
        if self.fires_at != self.slot:
            return f"shifted from {self.slot.isoformat()} by {self.calendar} ({self.reason})"
        return f"fires at {self.slot.isoformat()}"


class Filtered:
    """``inner``'s slots, filtered by ``calendars`` under ``policy``; days are read on the
    wall clock of ``time_zone`` (the schedule's)."""

    def __init__(
        self,
        inner: Timetable,
        calendars: Sequence[Calendar],
        policy: str = Shift.OMIT,
        time_zone: str = "UTC",
    ) -> None:
        if not calendars:
            raise CalendarError("a calendar filter needs at least one calendar")
        try:
            self.policy = Shift(policy)
        except ValueError:
            raise CalendarError(f"policy {policy!r} is not OMIT, BACKWARD or FORWARD") from None
        self.inner = inner
        # The inner timetable's slots as searched for this filter, each search done once
        # (a nested filter remembers its own inner timetable's).
        self._slots: Timetable = inner if isinstance(inner, Filtered) else Remembered(inner)
        self.calendars = tuple(calendars)
        self.zone = zone(time_zone)
        # A calendar whose weekly windows cover the whole week drops every slot: no search.
        self._closed = any(calendar.always_closed for calendar in self.calendars)
        # Answers already given: the filter is immutable (a calendar edit builds a new one),
        # so the rows of a batch that share it (firing/calendared.py) ask each search once.
        self._answers: dict[tuple[Any, ...], Any] = {}

    def _answer(self, key: tuple[Any, ...], work: Callable[[], T]) -> T:
        if key in self._answers:
            return cast(T, self._answers[key])
        found = work()
        if len(self._answers) >= MAX_ANSWERS:
            self._answers.clear()
        self._answers[key] = found
        return found

    # -- days -------------------------------------------------------------------------------
    def _day_off(self, day: date) -> tuple[str, str] | None:
        for calendar in self.calendars:
            reason = calendar.day_off(day)
            if reason is not None:
                return calendar.name, reason
        return None

    def _blackout(self, when: datetime) -> tuple[Calendar, str] | None:
        for calendar in self.calendars:
            window = calendar.window_at(when)
            if window is not None:
                return calendar, window.describe()
        return None

    def _business_day(self, day: date, step: int) -> date | None:
        """The first business day from ``day`` on (``step`` 1) or back (-1), within
        :data:`MAX_SHIFT_DAYS`."""
        for _ in range(MAX_SHIFT_DAYS + 1):
            if self._day_off(day) is None:
                return day
            day += DAY * step
        return None

    def _open_day(self, day: date, step: int) -> date:
        """The first business day after ``day`` (``step`` 1) or before it (-1), or the
        first day past :data:`MAX_SHIFT_DAYS` days off: a run of days off (a closure) is
        passed in a search a month at a time, not a day at a time."""
        try:
            found = self._business_day(day + DAY * step, step)
            return found if found is not None else day + DAY * step * (MAX_SHIFT_DAYS + 2)
        except OverflowError:  # next to the ends of the calendar: a day at a time
            return day + DAY * step

    def _day_of(self, when: datetime) -> date:
        return wall(when, self.zone).date()

    def _day_start(self, day: date) -> datetime:
        return instant(datetime.combine(day, time()), self.zone)

    def _margin(self, source: date, business: date, when: datetime) -> timedelta:
        """How far around ``when``'s wall time on ``source`` a search for the slots that
        move to ``business`` must look: nothing when neither day has an offset change (the
        wall times map one to one), else the jump of the change near ``when``."""
        if not (self._changes_on(source) or self._changes_on(business)):
            return timedelta(0)
        return jump_near(when, self.zone)

    def _changes_on(self, day: date) -> bool:
        """Whether the zone's UTC offset changes during ``day`` (its wall clock)."""
        return offset(self._day_start(day), self.zone) != offset(
            self._day_start(day + DAY), self.zone
        )

    def _moved(self, slot: datetime, day: date) -> datetime:
        """``slot`` at the same wall-clock time on ``day``."""
        if self._day_of(slot) == day:
            return slot
        return instant(datetime.combine(day, wall(slot, self.zone).time()), self.zone)

    # -- fates ------------------------------------------------------------------------------
    def fate(self, slot: datetime) -> Fate:
        """What becomes of ``slot``, one of ``inner``'s slots."""
        off = self._day_off(self._day_of(slot))
        target = slot
        if off is not None:
            if self.policy == Shift.OMIT:
                return Fate(slot, None, *off)
            step = 1 if self.policy == Shift.FORWARD else -1
            day = self._business_day(self._day_of(slot) + DAY * step, step)
            if day is None:
                return Fate(
                    slot, None, off[0], f"{off[1]}; no business day within {MAX_SHIFT_DAYS} days"
                )
            target = self._moved(slot, day)
        blackout = self._blackout(target)
        if blackout is not None:
            return Fate(slot, None, blackout[0].name, f"blackout: {blackout[1]}")
        if off is not None:
            return Fate(slot, target, *off)
        return Fate(slot, slot)

    def fates(self, start: datetime, end: datetime, limit: int = MAX_FATES) -> list[Fate]:
        """The planned slots in ``[start, end)`` (before any calendar) and their fates, the
        first ``limit`` of them."""
        return list(
            self._answer(("fates", start, end, limit), lambda: self._fates(start, end, limit))
        )

    def _fates(self, start: datetime, end: datetime, limit: int) -> list[Fate]:
        if isinstance(self.inner, Filtered):
            found = []
            for earlier in self.inner.fates(start, end, limit):
                if earlier.fires_at is None:
                    found.append(earlier)
                    continue
                later = self.fate(earlier.fires_at)
                if later.fires_at is None or later.kind == "shifted":
                    found.append(Fate(earlier.slot, later.fires_at, later.calendar, later.reason))
                else:
                    found.append(earlier)
            return found
        return [self.fate(slot) for slot in _slots(self._slots, start, end, limit)]

    def origins(self, slot: datetime) -> list[Fate]:
        """The fates of the planned slots that fire at ``slot`` (one of this timetable's
        slots): ``slot`` itself when it stays, and those a calendar moved onto it.

        Looks only where such a slot can be: at the same wall-clock time on the days whose
        slots fire on ``slot``'s day (next to a DST change, within the jump of it)."""
        return list(self._answer(("origins", slot), lambda: self._origins(slot)))

    def _origins(self, slot: datetime) -> list[Fate]:
        found: list[Fate] = []
        for candidate in self._landing(slot):
            later = self.fate(candidate)
            if later.fires_at != slot:
                continue
            if not isinstance(self.inner, Filtered):
                found.append(later)
                continue
            for earlier in self.inner.origins(candidate):
                if later.kind == "shifted":
                    earlier = Fate(earlier.slot, slot, later.calendar, later.reason)
                found.append(earlier)
        return found

    def shifts_onto(self, slot: datetime) -> bool:
        """Whether a calendar may have moved a planned slot onto ``slot`` (one of this
        timetable's slots), i.e. :meth:`origins` may hold a ``shifted`` fate: never under
        ``OMIT``, nor on a business day whose neighbours' slots stay on their own day."""
        if isinstance(self.inner, Filtered):
            return True
        if self.policy == Shift.OMIT:
            return False
        day = self._day_of(slot)
        return self._day_off(day) is not None or len(self._sources(day)) > 1

    def _landing(self, slot: datetime) -> list[datetime]:
        """``inner``'s slots that may fire at ``slot``."""
        day = self._day_of(slot)
        days = [day]
        if self.policy != Shift.OMIT and self._day_off(day) is None:
            days = self._sources(day)
        found = []
        for source in days:
            if source == day:
                found += [slot] if self._slots.slot_at_or_after(slot) == slot else []
                continue
            try:
                instants = moves.landing(slot, source, day, self.zone)
            except LookupError:
                found += self._landing_walk(slot, source)
                continue
            found += [at for at in instants if self._slots.slot_at_or_after(at) == at]
        return found

    def _landing_walk(self, slot: datetime, source: date) -> list[datetime]:
        """``inner``'s slots of ``source`` that may fire at ``slot``, looked for slot by
        slot within the jump of a DST change (a day :mod:`.moves` does not work out)."""
        at = instant(datetime.combine(source, wall(slot, self.zone).time()), self.zone)
        jump = max(jump_near(at, self.zone), jump_near(slot, self.zone))
        candidate, found = self._slots.slot_at_or_after(at - jump), []
        for _ in range(MAX_LANDING):
            if candidate is None or candidate > at + jump:
                break
            if self._day_of(candidate) == source:
                found.append(candidate)
            candidate = self._slots.slot_after(candidate)
        return found

    def _past(
        self, slot: datetime, source: date, business: date, when: datetime
    ) -> datetime | None:
        """The next slot of ``inner`` after ``slot`` (of ``source``, which moves to
        ``business`` at or before ``when``) that may move past ``when``: past those
        that cannot, in a few searches (:mod:`.moves`), not slot by slot."""
        if source != business:
            at = moves.skip_forward(slot, source, business, when, self.zone)
            if at is not None:
                return self._slots.slot_at_or_after(at)
        return self._slots.slot_after(slot)

    def _upto(
        self, slot: datetime, source: date, business: date, when: datetime
    ) -> datetime | None:
        """Mirror of :meth:`_past`: the previous slot that may move to ``when`` or before."""
        if source != business:
            at = moves.skip_back(slot, source, business, when, self.zone)
            if at is not None:
                return self._slots.slot_at_or_before(at)
        return self._slots.slot_at_or_before(slot - MICROSECOND)

    # -- the Timetable protocol -------------------------------------------------------------
    def slot_after(self, when: datetime) -> datetime | None:
        if self._closed:
            return None
        if self.policy == Shift.OMIT:
            return self._answer(("after", when), lambda: self._omit_after(when))
        return self._answer(("after", when), lambda: self._shift_after(when))

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        if self._closed:
            return None
        if self.policy == Shift.OMIT:
            return self._answer(("before", when), lambda: self._omit_at_or_before(when))
        return self._answer(("before", when), lambda: self._shift_at_or_before(when))

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        latest = self.slot_at_or_before(when)
        if latest is not None and latest == when:
            return latest
        return self.slot_after(when)

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        slot = latest
        for _ in range(max(steps, 0)):
            if slot <= oldest:
                return oldest
            earlier = self.slot_at_or_before(slot - MICROSECOND)
            if earlier is None:
                return oldest
            slot = earlier
        return max(slot, oldest)

    # -- OMIT: drop, and jump past the day off or the window --------------------------------
    def _omit_after(self, when: datetime) -> datetime | None:
        slot = self._slots.slot_after(when)
        for _ in range(MAX_SKIPS):
            if slot is None:
                return None
            if self._day_off(self._day_of(slot)) is not None:
                resume = self._day_start(self._open_day(self._day_of(slot), 1))
            else:
                blackout = self._blackout(slot)
                if blackout is None:
                    return slot
                resume = _window_end(blackout[0], slot)
            slot = self._slots.slot_at_or_after(max(resume, slot + MICROSECOND))
        return None

    def _omit_at_or_before(self, when: datetime) -> datetime | None:
        slot = self._slots.slot_at_or_before(when)
        for _ in range(MAX_SKIPS):
            if slot is None:
                return None
            if self._day_off(self._day_of(slot)) is not None:
                resume = self._day_start(self._open_day(self._day_of(slot), -1) + DAY) - MICROSECOND
            else:
                blackout = self._blackout(slot)
                if blackout is None:
                    return slot
                resume = _window_start(blackout[0], slot) - MICROSECOND
            slot = self._slots.slot_at_or_before(min(resume, slot - MICROSECOND))
        return None

    # -- BACKWARD / FORWARD: each business day takes its own slots and its days off's ------
    def _sources(self, business: date) -> list[date]:
        """The days whose slots fire on ``business``: itself, and the days off after it
        (BACKWARD) or before it (FORWARD)."""
        step = -1 if self.policy == Shift.BACKWARD else 1
        days = [business]
        day = business - DAY * step
        while len(days) <= MAX_SHIFT_DAYS and self._day_off(day) is not None:
            days.append(day)
            day -= DAY * step
        return days

    def _owner(self, day: date, later: bool) -> date | None:
        """The business day ``day``'s slots fire on; searching ``later`` or earlier when
        ``day`` has none."""
        step = 1 if self.policy == Shift.FORWARD else -1
        owner = self._business_day(day, step)
        if owner is None:  # dropped: look at the next days
            owner = self._business_day(day, 1 if later else -1)
        return owner

    def _shift_after(self, when: datetime) -> datetime | None:
        today = self._day_of(when)
        business = self._business_day(today, 1)
        for _ in range(MAX_SKIPS):
            if business is None:
                return None
            sources = self._sources(business)
            best = None
            for source in sources:
                found = self._first_on(source, business, when, today)
                if found is not None and (best is None or found < best):
                    best = found
            if best is not None:
                return best
            # Nothing here: go on from the next slot after these days.
            slot = self._slots.slot_at_or_after(self._day_start(max(sources) + DAY))
            if slot is None:
                return None
            owner = self._owner(self._day_of(slot), later=True)
            business = owner if owner is not None and owner > business else None
            if business is None:
                business = self._business_day(max(sources) + DAY, 1)
        return None

    def _first_on(
        self, source: date, business: date, when: datetime, today: date
    ) -> datetime | None:
        """The first slot of ``source`` that fires on ``business`` after ``when``."""
        if source == business == today:
            # Its slots stay where they are: no wall-clock move, no DST allowance to search.
            slot = self._slots.slot_after(when)
        else:
            start = self._day_start(source)
            if business == today:
                moved_when = datetime.combine(source, wall(when, self.zone).time())
                margin = self._margin(source, business, when)
                start = max(start, instant(moved_when, self.zone) - margin)
            slot = self._slots.slot_at_or_after(start)
        for _ in range(MAX_SKIPS):
            if slot is None or self._day_of(slot) != source:
                return None
            moved = self._moved(slot, business)
            if moved <= when:
                slot = self._past(slot, source, business, when)
                continue
            blackout = self._blackout(moved)
            if blackout is None:
                return moved
            # Jump past the window (as OMIT does), not a slot at a time.
            resume = _window_end(blackout[0], moved)
            if self._day_of(resume) != business:
                return None  # blacked out to the end of the day
            slot = self._slots.slot_at_or_after(
                max(self._moved(resume, source), slot + MICROSECOND)
            )
        return None

    def _shift_at_or_before(self, when: datetime) -> datetime | None:
        today = self._day_of(when)
        business = self._business_day(today, -1)
        for _ in range(MAX_SKIPS):
            if business is None:
                return None
            sources = self._sources(business)
            best = None
            for source in sources:
                found = self._last_on(source, business, when, today)
                if found is not None and (best is None or found > best):
                    best = found
            if best is not None:
                return best
            slot = self._slots.slot_at_or_before(self._day_start(min(sources)) - MICROSECOND)
            if slot is None:
                return None
            owner = self._owner(self._day_of(slot), later=False)
            business = owner if owner is not None and owner < business else None
            if business is None:
                business = self._business_day(min(sources) - DAY, -1)
        return None

    def _last_on(
        self, source: date, business: date, when: datetime, today: date
    ) -> datetime | None:
        """The last slot of ``source`` that fires on ``business`` at or before ``when``."""
        if source == business == today:
            # Its slots stay where they are: no wall-clock move, no DST allowance to search.
            slot = self._slots.slot_at_or_before(when)
        else:
            end = self._day_start(source + DAY) - MICROSECOND
            if business == today:
                moved_when = datetime.combine(source, wall(when, self.zone).time())
                margin = self._margin(source, business, when)
                end = min(end, instant(moved_when, self.zone) + margin)
            slot = self._slots.slot_at_or_before(end)
        for _ in range(MAX_SKIPS):
            if slot is None or self._day_of(slot) != source:
                return None
            moved = self._moved(slot, business)
            if moved > when:
                slot = self._upto(slot, source, business, when)
                continue
            blackout = self._blackout(moved)
            if blackout is None:
                return moved
            resume = _window_start(blackout[0], moved) - MICROSECOND
            if self._day_of(resume) != business:
                return None  # blacked out from the start of the day
            slot = self._slots.slot_at_or_before(
                min(self._moved(resume, source), slot - MICROSECOND)
            )
        return None


def _slots(
    table: Timetable, start: datetime, end: datetime, limit: int = MAX_FATES
) -> Iterator[datetime]:
    slot = table.slot_at_or_after(start)
    for _ in range(limit):
        if slot is None or slot >= end:
            return
        yield slot
        slot = table.slot_after(slot)


def _window_end(calendar: Calendar, when: datetime) -> datetime:
    window = calendar.window_at(when)
    return when + MICROSECOND if window is None else window.end_after(when)


def _window_start(calendar: Calendar, when: datetime) -> datetime:
    window = calendar.window_at(when)
    return when if window is None else window.start_before(when)


def with_calendars(
    table: Timetable, calendars: Sequence[Calendar], policy: str, time_zone: str
) -> Timetable:
    """``table`` filtered by ``calendars`` under ``policy`` (itself when there are none)."""
    return Filtered(table, calendars, policy, time_zone) if calendars else table


def fates_to_record(
    table: Timetable,
    start: datetime,
    end: datetime | None,
    fired: datetime | None,
    limit: int = MAX_FATES,
) -> list[Fate]:
    """What a plan that moved a schedule on from its slot ``start`` to ``end`` (its next
    slot; None: none) and fired ``fired`` (or nothing) passed by, to be recorded: the
    planned slots moved onto ``fired`` (``shifted``), and those in ``[start, end)`` that
    the calendars dropped (``excluded``). Slots moved elsewhere are recorded when they
    fire; nothing for a timetable without calendars. At most ``limit`` dropped slots are
    listed (each costs a search of the inner timetable: a per-minute cron passing a
    weekend's freeze drops thousands)."""
    if not isinstance(table, Filtered):
        return []
    found = []
    if fired is not None and table.shifts_onto(fired):
        found = [fate for fate in table.origins(fired) if fate.kind == "shifted"]
    stop = end if end is not None else (fired or start) + MICROSECOND
    found += [fate for fate in table.fates(start, stop, limit) if fate.fires_at is None]
    return found


def fates(table: Timetable, start: datetime, end: datetime) -> list[Fate]:
    """Every planned slot of ``table`` in ``[start, end)`` with its fate (a timetable
    without calendars: each fires at its slot)."""
    if isinstance(table, Filtered):
        return table.fates(start, end)
    return [Fate(slot, slot) for slot in _slots(table, start, end)]


__all__ = [
    "MAX_SHIFT_DAYS",
    "Fate",
    "Filtered",
    "Shift",
    "fates",
    "fates_to_record",
    "with_calendars",
]
