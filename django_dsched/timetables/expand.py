"""The wall-clock candidates of a recurrence rule, period by period.

An RRULE (RFC 5545, section 3.3.10) is read as python-dateutil reads it on naive datetimes
(the tests compare the two): the rule's periods (years, months, weeks, days, hours, minutes
or seconds, every ``INTERVAL`` of them counted from DTSTART's period) each give a set of
wall times, limited and expanded by the BYxxx parts, cut by BYSETPOS, and kept from DTSTART
on. Times here are naive wall times; :mod:`.rrule` turns them into instants by the DST rule.

Why not dateutil's own iteration: asked for the occurrences after a time, it walks from
DTSTART, and when no occurrence comes (a rule that no longer matches, an empty window) it
walks period by period to year 9999 whatever UNTIL says (seconds of CPU). Here the search
starts in the period that holds the time asked about (its number is computed, not walked
to) and looks at most :data:`HORIZON` ahead.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY, SECONDLY = range(7)
FREQUENCIES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
# The length of one period of the sub-daily frequencies.
UNITS = {HOURLY: timedelta(hours=1), MINUTELY: timedelta(minutes=1), SECONDLY: timedelta(seconds=1)}
DAY = timedelta(days=1)
# How far ahead of a time a search for the next candidate looks: a century, the longest
# period an interval schedule may have. A rule whose next occurrence is further away has
# none (the schedule completes).
HORIZON = timedelta(days=36525)
LAST_DATE = date(9998, 12, 31)


@dataclass(frozen=True, slots=True)
class Rule:
    """A normalized RRULE: every default taken from DTSTART is explicit (as dateutil does),
    so any period can be expanded without the ones before it."""

    freq: int
    interval: int
    dtstart: datetime  # naive wall time, whole seconds
    wkst: int = 0  # Monday
    bymonth: frozenset[int] | None = None
    byweekno: frozenset[int] | None = None
    byyearday: frozenset[int] | None = None
    bymonthday: frozenset[int] | None = None  # 1..31 and -31..-1
    byweekday: frozenset[int] | None = None  # 0 = Monday
    bynweekday: tuple[tuple[int, int], ...] | None = None  # (weekday, n): the n-th in range
    byhour: tuple[int, ...] | None = None  # sorted; None: every value (sub-daily frequencies)
    byminute: tuple[int, ...] | None = None
    bysecond: tuple[int, ...] | None = None
    bysetpos: tuple[int, ...] | None = None
    last: datetime | None = None  # no candidate after this wall time (UNTIL, COUNT)


# -- days ---------------------------------------------------------------------------------


def month_length(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


def week1_start(year: int, wkst: int) -> date:
    """The first day of week 1 of ``year``: the week (starting on ``wkst``) that holds
    January 4, i.e. the first with at least four days in the year."""
    jan4 = date(year, 1, 4)
    return jan4 - timedelta(days=(jan4.weekday() - wkst) % 7)


def weeks_in(year: int, wkst: int) -> int:
    return (week1_start(year + 1, wkst) - week1_start(year, wkst)).days // 7


def _weekno_days(rule: Rule, year: int) -> list[date]:
    """The days of ``year`` in the weeks BYWEEKNO names (a week may belong to the year
    before or after)."""
    assert rule.byweekno is not None
    days: list[date] = []
    for week_year in (year - 1, year, year + 1):
        count = weeks_in(week_year, rule.wkst)
        first = week1_start(week_year, rule.wkst)
        for n in rule.byweekno:
            number = n if n > 0 else count + 1 + n
            if 1 <= number <= count:
                start = first + timedelta(days=7 * (number - 1))
                days.extend(d for k in range(7) if (d := start + timedelta(days=k)).year == year)
    return days


def _nth_days(rule: Rule, ranges: Sequence[tuple[date, date]]) -> set[date]:
    """The days BYDAY's ``n``-th weekdays name within each (first, last) range."""
    found: set[date] = set()
    assert rule.bynweekday is not None
    for first, last in ranges:
        for weekday, n in rule.bynweekday:
            if n > 0:
                day = first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
            else:
                day = last - timedelta(days=(last.weekday() - weekday) % 7 + 7 * (-n - 1))
            if first <= day <= last:
                found.add(day)
    return found


def _month_range(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year, month, month_length(year, month))


def _matches(rule: Rule, day: date, nth: set[date] | None) -> bool:
    """Whether ``day`` passes every day filter of the rule (``nth``: the days the n-th
    weekdays name in this period, when BYDAY has any)."""
    if rule.bymonth is not None and day.month not in rule.bymonth:
        return False
    if rule.byweekday is not None and day.weekday() not in rule.byweekday:
        return False
    if nth is not None and day not in nth:
        return False
    if rule.bymonthday is not None:
        length = month_length(day.year, day.month)
        if day.day not in rule.bymonthday and day.day - length - 1 not in rule.bymonthday:
            return False
    if rule.byyearday is not None:
        number = day.timetuple().tm_yday
        length = 366 if calendar.isleap(day.year) else 365
        if number not in rule.byyearday and number - length - 1 not in rule.byyearday:
            return False
    return True


def _days_of_months(year: int, months: Sequence[int], rule: Rule) -> list[date]:
    """Seed days of the given months of ``year``: only BYMONTHDAY's days when it is the
    narrowest filter, else every day."""
    days: list[date] = []
    for month in months:
        length = month_length(year, month)
        if rule.bymonthday is not None and rule.byyearday is None and rule.byweekno is None:
            numbers = {n if n > 0 else length + 1 + n for n in rule.bymonthday}
            days.extend(date(year, month, n) for n in sorted(numbers) if 1 <= n <= length)
        else:
            days.extend(date(year, month, n) for n in range(1, length + 1))
    return days


def _year_days(rule: Rule, year: int) -> list[date]:
    months = sorted(rule.bymonth) if rule.bymonth else list(range(1, 13))
    if rule.byweekno is not None:
        seeds = _weekno_days(rule, year)
    elif rule.byyearday is not None:
        length = 366 if calendar.isleap(year) else 365
        jan1 = date(year, 1, 1)
        numbers = {n if n > 0 else length + 1 + n for n in rule.byyearday}
        seeds = [jan1 + timedelta(days=n - 1) for n in numbers if 1 <= n <= length]
    else:
        seeds = _days_of_months(year, months, rule)
    nth = None
    if rule.bynweekday is not None:
        if rule.bymonth:
            ranges = [_month_range(year, month) for month in months]
        else:
            ranges = [(date(year, 1, 1), date(year, 12, 31))]
        nth = _nth_days(rule, ranges)
    return sorted({day for day in seeds if _matches(rule, day, nth)})


def _month_days(rule: Rule, year: int, month: int) -> list[date]:
    nth = None if rule.bynweekday is None else _nth_days(rule, [_month_range(year, month)])
    return [day for day in _days_of_months(year, [month], rule) if _matches(rule, day, nth)]


def _week_days(rule: Rule, first: date, start: date) -> list[date]:
    """The days of the week starting ``first``, from ``start`` on (dateutil's first week
    starts at DTSTART's day)."""
    days = (first + timedelta(days=k) for k in range(7))
    return [day for day in days if day >= start and _matches(rule, day, None)]


# -- periods of a day or longer -------------------------------------------------------------


def _timeset(rule: Rule) -> list[time]:
    assert rule.byhour is not None and rule.byminute is not None and rule.bysecond is not None
    return [time(h, m, s) for h in rule.byhour for m in rule.byminute for s in rule.bysecond]


def _select(rule: Rule, days: Sequence[date], times: Sequence[time]) -> list[datetime]:
    """A period's wall times (days x times, in order), cut by BYSETPOS."""
    if rule.bysetpos is None:
        return [datetime.combine(day, moment) for day in days for moment in times]
    size = len(days) * len(times)
    chosen = set()
    for position in rule.bysetpos:
        index = position - 1 if position > 0 else size + position
        if 0 <= index < size:
            day_index, time_index = divmod(index, len(times))
            chosen.add(datetime.combine(days[day_index], times[time_index]))
    return sorted(chosen)


def _period_of(rule: Rule, start: date) -> int:
    """The number (in INTERVALs, 0 = DTSTART's) of the first period not ending before
    ``start``."""
    origin = rule.dtstart.date()
    if rule.freq == YEARLY:
        elapsed = start.year - origin.year
    elif rule.freq == MONTHLY:
        elapsed = (start.year - origin.year) * 12 + start.month - origin.month
    elif rule.freq == WEEKLY:
        elapsed = (_week_start(start, rule.wkst) - _week_start(origin, rule.wkst)).days // 7
    else:
        elapsed = (start - origin).days
    return max(0, elapsed // rule.interval)


def _week_start(day: date, wkst: int) -> date:
    return day - timedelta(days=(day.weekday() - wkst) % 7)


def _period_days(rule: Rule, k: int) -> tuple[date, list[date]] | None:
    """Period ``k``'s first day and its days that pass the filters; None past the calendar."""
    origin = rule.dtstart.date()
    step = k * rule.interval
    if rule.freq == YEARLY:
        year = origin.year + step
        if year > LAST_DATE.year:
            return None
        return date(year, 1, 1), _year_days(rule, year)
    if rule.freq == MONTHLY:
        year, month0 = divmod(origin.month - 1 + step, 12)
        year += origin.year
        if year > LAST_DATE.year:
            return None
        return date(year, month0 + 1, 1), _month_days(rule, year, month0 + 1)
    if rule.freq == WEEKLY:
        first = _week_start(origin, rule.wkst) + timedelta(days=7 * step)
        if first > LAST_DATE:
            return None
        return first, _week_days(rule, first, origin if k == 0 else first)
    day = origin + timedelta(days=step)
    if day > LAST_DATE:
        return None
    return day, [day] if _matches(rule, day, None) else []


def _daily_or_longer(rule: Rule, start: datetime, limit: datetime) -> Iterator[datetime]:
    times = _timeset(rule)
    k = _period_of(rule, start.date())
    while True:
        period = _period_days(rule, k)
        if period is None or datetime.combine(period[0], time()) > limit:
            return
        days = period[1]
        if rule.bysetpos is None:
            days = [day for day in days if day >= start.date()]
        for moment in _select(rule, days, times):
            if moment > limit:
                return
            if moment >= start:
                yield moment
        k += 1


# -- sub-daily periods ----------------------------------------------------------------------


def _aligned(first_offset: int, interval: int, values: Sequence[int] | None, top: int) -> list[int]:
    """The values in ``[0, top)`` (or in ``values``) at a multiple of ``interval`` periods
    from DTSTART's, the first value being ``first_offset`` periods from it."""
    if values is None:
        return list(range((-first_offset) % interval, top, interval))
    return [v for v in values if (first_offset + v) % interval == 0]


def _origin(rule: Rule) -> datetime:
    """The start of DTSTART's period (a sub-daily rule's periods count from it)."""
    if rule.freq == HOURLY:
        return rule.dtstart.replace(minute=0, second=0)
    if rule.freq == MINUTELY:
        return rule.dtstart.replace(second=0)
    return rule.dtstart


def _day_times(rule: Rule, day: date, after: time) -> Iterator[time]:
    """The times of ``day`` at or after ``after`` for an HOURLY, MINUTELY or SECONDLY rule,
    each period cut by BYSETPOS."""
    unit = UNITS[rule.freq]
    origin = _origin(rule)
    midnight = datetime.combine(day, time())
    units_per_hour = 3600 // (unit // timedelta(seconds=1))
    hour_offset = (midnight - origin) // unit
    hours = [h for h in (rule.byhour or range(24)) if h >= after.hour]
    for hour in hours:
        first = hour_offset + hour * units_per_hour
        if rule.freq == HOURLY:
            if first % rule.interval:
                continue
            assert rule.byminute is not None and rule.bysecond is not None
            period = [time(hour, m, s) for m in rule.byminute for s in rule.bysecond]
            yield from (t for t in _cut(rule, period) if t >= after)
            continue
        minutes: Sequence[int] = range(60)
        if rule.freq == MINUTELY:
            minutes = _aligned(first, rule.interval, rule.byminute, 60)
        elif rule.byminute is not None:
            minutes = rule.byminute
        for minute in minutes:
            if (hour, minute) < (after.hour, after.minute):
                continue
            if rule.freq == MINUTELY:
                assert rule.bysecond is not None
                period = [time(hour, minute, s) for s in rule.bysecond]
                yield from (t for t in _cut(rule, period) if t >= after)
                continue
            offset = first + minute * 60
            for second in _aligned(offset, rule.interval, rule.bysecond, 60):
                moment = time(hour, minute, second)
                if moment >= after and _cut(rule, [moment]):
                    yield moment


def _cut(rule: Rule, period: list[time]) -> list[time]:
    if rule.bysetpos is None:
        return period
    size = len(period)
    kept = {period[p - 1 if p > 0 else size + p] for p in rule.bysetpos if -size <= p <= size}
    return sorted(kept)


def _next_aligned_day(rule: Rule, day: date) -> date:
    """The first day from ``day`` that holds a period at a multiple of INTERVAL from
    DTSTART's (a sub-daily rule with a long INTERVAL skips days)."""
    unit = UNITS[rule.freq]
    origin = _origin(rule)
    elapsed = (datetime.combine(day, time()) - origin) // unit
    ahead = -elapsed % rule.interval
    return (datetime.combine(day, time()) + unit * ahead).date()


def _sub_daily(rule: Rule, start: datetime, limit: datetime) -> Iterator[datetime]:
    day, after = start.date(), start.time()
    while datetime.combine(day, time()) <= limit:
        aligned = _next_aligned_day(rule, day)
        if aligned != day:
            day, after = aligned, time()
            continue
        if _matches(rule, day, None):
            for moment in _day_times(rule, day, after):
                candidate = datetime.combine(day, moment)
                if candidate > limit:
                    return
                yield candidate
        if day >= LAST_DATE:
            return
        day, after = day + DAY, time()


def candidates(rule: Rule, start: datetime, horizon: timedelta = HORIZON) -> Iterator[datetime]:
    """The rule's wall times at or after ``start`` (and DTSTART), ascending, up to its last
    one and no further than ``horizon`` after ``start``."""
    start = max(start, rule.dtstart)
    try:
        limit = start + horizon
    except OverflowError:
        limit = datetime.combine(LAST_DATE, time.max)
    if rule.last is not None:
        limit = min(limit, rule.last)
    if start > limit:
        return iter(())
    if rule.freq in UNITS:
        return _sub_daily(rule, start, limit)
    return _daily_or_longer(rule, start, limit)
