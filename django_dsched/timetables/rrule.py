"""Recurrence-rule timetables (RFC 5545 RRULE, RDATE, EXDATE) in an IANA time zone.

The rule gives wall times on the schedule zone's clock (:mod:`.expand`); each becomes an
instant by the rule cron and day-to-year intervals use (:func:`.zones.instant`):

* **Gap** (spring forward): a wall time that does not exist fires at the instant it would
  have had with the offset before the gap: a 02:30 slot on the day clocks jump
  02:00 -> 03:00 fires at 03:30 new time. If the rule also has a real 03:30 slot, the two
  are one slot and fire once.
* **Fold** (fall back): a wall time that occurs twice fires once, at its first occurrence:
  a 01:30 slot on the day clocks go 02:00 -> 01:00 fires at the first 01:30 only.

So ``FREQ=HOURLY`` steps the wall clock as cron's ``0 * * * *`` does (23 fires on the day
clocks spring forward, 24 on the day they fall back); for durations on the UTC timeline use
an interval schedule. An RDATE adds a slot (a wall time by the same rule, or a UTC time).
An EXDATE drops the wall time it names, as RFC 5545 compares values (an EXDATE of 02:00 on
the spring-forward day leaves a real 03:00 slot, which lands on the same instant, in
place); one written in UTC drops the slot at that instant.
COUNT counts the rule's wall times, before EXDATE and before two wall times merge into one
slot, as RFC 5545 counts occurrences.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from django.utils.translation import gettext_lazy as _

from django_dsched.exceptions import RecurrenceError, ValidationError
from django_dsched.timetables.expand import (
    FREQUENCIES,
    HORIZON,
    HOURLY,
    MINUTELY,
    MONTHLY,
    SECONDLY,
    UNITS,
    WEEKLY,
    YEARLY,
    Rule,
    candidates,
)
from django_dsched.timetables.recurrence import Recurrence, When, parse
from django_dsched.timetables.zones import as_utc, instant, offset, offsets_near, wall, zone

MICROSECOND = timedelta(microseconds=1)
# The length of one period of each frequency of a day or longer (at most).
PERIOD_LENGTH = {YEARLY: timedelta(days=366), MONTHLY: timedelta(days=31), WEEKLY: timedelta(7)}


@dataclass(frozen=True, slots=True)
class Plan:
    """A recurrence made concrete in a zone: the rule, and its dates as instants."""

    rule: Rule
    zone: ZoneInfo
    until: datetime | None  # UNTIL as an instant, when written in UTC
    rdates: tuple[datetime, ...]  # sorted instants, EXDATEs taken out
    exdates: frozenset[datetime]  # the EXDATEs written in UTC
    exdate_walls: frozenset[datetime]  # the others: wall times


def _instant(when: When, tz: ZoneInfo) -> datetime:
    return when.at.replace(tzinfo=UTC) if when.utc else instant(when.at, tz)


def _normalize(recurrence: Recurrence, dtstart: datetime) -> Rule:
    """The rule with DTSTART's defaults made explicit (as python-dateutil fills them)."""
    freq = recurrence.freq
    values = dict(recurrence.lists)
    plain = frozenset(day for day, n in recurrence.byday if n == 0)
    numbered = tuple(sorted((day, n) for day, n in recurrence.byday if n))
    bymonth = values.get("BYMONTH")
    bymonthday = values.get("BYMONTHDAY")
    byweekday: frozenset[int] | None = plain or None
    if not (recurrence.byday or {"BYWEEKNO", "BYYEARDAY", "BYMONTHDAY"} & values.keys()):
        if freq == YEARLY:
            bymonth = bymonth or (dtstart.month,)
            bymonthday = (dtstart.day,)
        elif freq == MONTHLY:
            bymonthday = (dtstart.day,)
        elif freq == WEEKLY:
            byweekday = frozenset({dtstart.weekday()})

    def level(name: str, below: int, default: int) -> tuple[int, ...] | None:
        given = values.get(name)
        if given is not None:
            return given
        return (default,) if freq < below else None

    def optional(name: str) -> frozenset[int] | None:
        given = values.get(name)
        return None if given is None else frozenset(given)

    return Rule(
        freq=freq,
        interval=recurrence.interval,
        dtstart=dtstart,
        wkst=recurrence.wkst,
        bymonth=None if bymonth is None else frozenset(bymonth),
        byweekno=optional("BYWEEKNO"),
        byyearday=optional("BYYEARDAY"),
        bymonthday=None if bymonthday is None else frozenset(bymonthday),
        byweekday=byweekday,
        bynweekday=numbered or None,
        byhour=level("BYHOUR", 4, dtstart.hour),
        byminute=level("BYMINUTE", 5, dtstart.minute),
        bysecond=level("BYSECOND", SECONDLY, dtstart.second),
        bysetpos=values.get("BYSETPOS"),
    )


def _check_positions(rule: Rule) -> None:
    """Refuse a sub-daily rule whose BYSETPOS picks nothing: each of its periods holds the
    same number of times, so no period ever has the position asked for."""
    if rule.bysetpos is None or rule.freq not in UNITS:
        return
    size = 1
    if rule.freq == HOURLY:
        size = len(rule.byminute or ()) * len(rule.bysecond or ())
    elif rule.freq == MINUTELY:
        size = len(rule.bysecond or ())
    if all(abs(position) > size for position in rule.bysetpos):
        raise RecurrenceError(
            f"the rule never fires: each {FREQUENCIES[rule.freq]} period holds {size} "
            f"time(s), and BYSETPOS asks for position(s) {', '.join(map(str, rule.bysetpos))}"
        )


def _last_of_count(rule: Rule, count: int) -> datetime | None:
    """The ``count``-th wall time of the rule (None: it has none)."""
    last = None
    for number, moment in enumerate(candidates(rule, rule.dtstart), start=1):
        last = moment
        if number == count:
            break
    return last


@lru_cache(maxsize=4096)
def compile_plan(text: str, time_zone: str, start: datetime | None = None) -> Plan:
    """``text`` in ``time_zone``; ``start`` (a naive wall time) is DTSTART when the text has
    none. Cached: the fire path builds a timetable per due row."""
    recurrence = parse(text)
    tz = zone(time_zone)
    if recurrence.zone_name is not None and recurrence.zone_name != time_zone:
        raise RecurrenceError(
            f"the recurrence's TZID {recurrence.zone_name} is not the schedule's time zone "
            f"{time_zone}: give times in {time_zone}, or in UTC with Z"
        )
    if recurrence.dtstart is not None:
        given = recurrence.dtstart
        dtstart = wall(_instant(given, tz), tz) if given.utc else given.at
    elif start is not None:
        dtstart = start.replace(microsecond=0)
    else:
        raise RecurrenceError("the recurrence has no DTSTART and no start was given")
    rule = _normalize(recurrence, dtstart)
    _check_positions(rule)
    until = None
    last: datetime | None = None
    if recurrence.until is not None and recurrence.until.utc:
        until = _instant(recurrence.until, tz)
        # Wall times later than this all land after UNTIL.
        last = (until + offsets_near(until, tz)[1]).replace(tzinfo=None)
    elif recurrence.until is not None:
        last = recurrence.until.at
    rule = _replace_last(rule, last)
    if recurrence.count is not None:
        rule = _replace_last(rule, _last_of_count(rule, recurrence.count) or datetime.min)
    exdates = frozenset(_instant(when, tz) for when in recurrence.exdates if when.utc)
    walls = frozenset(when.at for when in recurrence.exdates if not when.utc)
    rdates = {
        moment
        for when in recurrence.rdates
        if (moment := _instant(when, tz)) not in exdates
        and (when.at if not when.utc else wall(moment, tz)) not in walls
    }
    return Plan(rule, tz, until, tuple(sorted(rdates)), exdates, walls)


def _replace_last(rule: Rule, last: datetime | None) -> Rule:
    if last is None:
        return rule
    fields = {name: getattr(rule, name) for name in Rule.__slots__}
    fields["last"] = last
    return Rule(**fields)


class RRuleTimetable:
    """The instants a recurrence gives in a time zone (the :class:`.Timetable` protocol)."""

    def __init__(self, text: str, time_zone: str = "UTC", start: datetime | None = None) -> None:
        tz = zone(time_zone)
        recurrence = parse(text)
        anchor = None
        if recurrence.dtstart is None and start is not None:
            anchor = wall(start, tz).replace(microsecond=0)
        self.text = text
        self.plan = compile_plan(text, time_zone, anchor)
        self.zone = tz
        rule = self.plan.rule
        self._span = UNITS.get(rule.freq) or PERIOD_LENGTH.get(rule.freq, timedelta(days=1))
        self._span *= rule.interval

    def _resolve(self, naive: datetime) -> datetime | None:
        """The slot a wall time of the rule gives, or None (an EXDATE, after UNTIL)."""
        if naive in self.plan.exdate_walls:
            return None
        moment = instant(naive, self.zone)
        if moment in self.plan.exdates:
            return None
        if self.plan.until is not None and moment > self.plan.until:
            return None
        return moment

    def slot_after(self, when: datetime) -> datetime | None:
        """The first slot strictly after ``when``; None if there is none (within the
        look-ahead of :data:`.expand.HORIZON`).

        Wall times and instants are not in the same order around a gap, so the search
        starts back by the size of a gap just passed and keeps the earliest instant after
        ``when`` until no later wall time can beat it (as :class:`.CronTimetable` does).
        """
        tz = self.zone
        rdates = self.plan.rdates
        index = bisect.bisect_right(rdates, when)
        best = rdates[index] if index < len(rdates) else None
        low, _high = offsets_near(when, tz)
        high = _high if best is None else offsets_near(best, tz)[1]
        start = wall(when, tz) - max(timedelta(0), offset(when, tz) - low)
        for naive in candidates(self.plan.rule, start):
            if best is not None and as_utc(naive, high) > best:
                break
            moment = self._resolve(naive)
            if moment is not None and moment > when and (best is None or moment < best):
                best = moment
                high = offsets_near(best, tz)[1]
        return best

    def slot_at_or_before(self, when: datetime) -> datetime | None:
        """The latest slot at or before ``when``; None if there is none."""
        found = self._before(when + MICROSECOND, 1)
        return found[-1] if found else None

    def slot_at_or_after(self, when: datetime) -> datetime | None:
        latest = self.slot_at_or_before(when)
        if latest is not None and latest == when:
            return latest
        return self.slot_after(when)

    def rewind(self, latest: datetime, steps: int, oldest: datetime) -> datetime:
        """The slot ``steps`` slots before ``latest``, or ``oldest`` when that would be
        earlier: the rule is expanded backwards from ``latest`` in growing windows, so the
        cost is that of the ``steps`` slots, never of the whole backlog."""
        if steps <= 0:
            return latest
        if latest <= oldest:
            return oldest
        found = self._before(latest, steps, floor=oldest)
        if len(found) < steps:
            return oldest
        return max(found[0], oldest)

    def _before(self, when: datetime, count: int, floor: datetime | None = None) -> list[datetime]:
        """Up to ``count`` slots strictly before ``when`` (and not before ``floor``),
        ascending: the latest ones."""
        tz, rule = self.zone, self.plan.rule
        rdates = self.plan.rdates
        top = bisect.bisect_left(rdates, when)
        bottom_index = max(0, top - count)
        if floor is not None:
            bottom_index = max(bottom_index, bisect.bisect_left(rdates, floor))
        found = set(rdates[bottom_index:top])
        low, high = offsets_near(when, tz)
        # Only a fold holds later wall times that land before ``when``.
        end = wall(when, tz) + max(timedelta(0), high - offset(when, tz)) + MICROSECOND
        if rule.last is not None:
            end = min(end, rule.last + MICROSECOND)
        bottom = rule.dtstart
        if floor is not None:
            bottom = max(bottom, wall(floor, tz) - timedelta(days=1))
        span = self._span
        while end >= bottom:
            begin = max(end - span, bottom)
            for naive in candidates(rule, begin, end - begin):
                if naive >= end:
                    break
                moment = self._resolve(naive)
                if moment is not None and moment < when:
                    found.add(moment)
            kept = sorted(found)[-count:]
            if len(kept) == count:
                least = min(low, offsets_near(kept[0], tz)[0])
                if as_utc(begin, least) <= kept[0]:
                    break  # every earlier wall time lands before the slots kept
            if begin <= bottom or span > HORIZON:
                break
            end, span = begin, span * 2
        kept = sorted(found)[-count:]
        return kept if floor is None else [slot for slot in kept if slot >= floor]


def check_recurrence(text: str, time_zone: str = "UTC", start: datetime | None = None) -> None:
    """Raise :class:`RecurrenceError` unless ``text`` can drive a schedule in
    ``time_zone`` starting at ``start`` (an aware datetime; DTSTART when the text has
    none): every part valid, and at least one slot within a century of DTSTART."""
    table = RRuleTimetable(text, time_zone, start or datetime(2000, 1, 1, tzinfo=UTC))
    rule = table.plan.rule
    first = instant(rule.dtstart, table.zone) - timedelta(days=1)
    if table.plan.rdates:
        first = min(first, table.plan.rdates[0] - MICROSECOND)
    if table.slot_after(first) is None:
        raise RecurrenceError(
            "the rule never fires: no date matches all of its parts within a century of "
            f"DTSTART ({rule.dtstart:%Y-%m-%d %H:%M:%S})"
        )


def validate_recurrence(value: str) -> None:
    """A model field validator (like ``validate_cron_expression``): the recurrence alone,
    in UTC, from its DTSTART (or from 2000-01-01 when it has none). A schedule's own zone
    and start are checked by :func:`check_recurrence` where both are known."""
    try:
        check_recurrence(value)
    except RecurrenceError as exc:
        raise ValidationError(
            _("Invalid recurrence rule: %(error)s."), code="invalid_rrule", params={"error": exc}
        ) from None


__all__ = ["RRuleTimetable", "check_recurrence", "compile_plan", "validate_recurrence"]
