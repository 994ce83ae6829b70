"""Calendars as data: the days a business does not work, and the windows nothing may run.

A :class:`Calendar` is a name, a set of excluded dates (public holidays of a country or
subdivision from the ``holidays`` package, plus dates added or removed by hand), the
weekend days (Saturday and Sunday unless told otherwise; none for a holiday-only calendar)
and blackout windows: one-off ``[start, end)`` spans of instants (:class:`Blackout`), or
weekly windows on the wall clock of a zone (:class:`WeeklyWindow`, e.g. Friday 18:00 to
Monday 06:00 in Europe/Brussels).

A *business day* is a date that is neither a weekend day nor excluded. Dates are read on
the schedule zone's wall clock (:mod:`.filtered`); a weekly window reads its own zone's wall
clock, so it keeps its wall-clock hours across DST changes (the Friday-to-Monday window is
an hour shorter or longer on the weekend clocks change). Everything here is immutable and
deterministic: holidays are looked up once, when the calendar is built, and kept as dates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

import holidays

from django_dsched.exceptions import CalendarError, CronError
from django_dsched.timetables.zones import wall, zone

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SATURDAY_AND_SUNDAY = frozenset({5, 6})
WEEK = timedelta(days=7)
# The widest span of years a calendar's holidays may be generated for.
MAX_YEARS = 200


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise CalendarError(f"{what} must be timezone-aware")
    return value.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Blackout:
    """A one-off window: every instant from ``start`` up to (not including) ``end``."""

    start: datetime
    end: datetime
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _aware(self.start, "a blackout's start"))
        object.__setattr__(self, "end", _aware(self.end, "a blackout's end"))
        if self.end <= self.start:
            raise CalendarError("a blackout must end after it starts")

    def covers(self, when: datetime) -> bool:
        return self.start <= when < self.end

    def end_after(self, when: datetime) -> datetime:
        """When the window covering ``when`` ends."""
        return self.end

    def start_before(self, when: datetime) -> datetime:
        """When the window covering ``when`` started."""
        return self.start

    def describe(self) -> str:
        return self.label or f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"


@lru_cache(maxsize=1024)
def _week_us(day: int, moment: time) -> int:
    """``day`` (0: Monday) at ``moment`` as microseconds since Monday 00:00 (as
    :meth:`WeeklyWindow._minute`)."""
    return WeeklyWindow._minute(day, moment) // timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class WeeklyWindow:
    """Every week, from ``start_day`` at ``start_time`` up to ``end_day`` at ``end_time``
    on the wall clock of ``time_zone`` (days: 0 = Monday). A window may wrap past Sunday."""

    start_day: int
    start_time: time
    end_day: int
    end_time: time
    time_zone: str = "UTC"
    label: str = ""

    def __post_init__(self) -> None:
        for day in (self.start_day, self.end_day):
            if not 0 <= day <= 6:
                raise CalendarError(f"a weekday is 0 (Monday) to 6 (Sunday), not {day}")
        try:
            zone(self.time_zone)
        except CronError as exc:
            raise CalendarError(str(exc)) from None
        if self._minute(self.start_day, self.start_time) == self._minute(
            self.end_day, self.end_time
        ):
            raise CalendarError("a weekly window must not start and end at the same time")

    @staticmethod
    def _minute(day: int, moment: time) -> timedelta:
        return timedelta(days=day, hours=moment.hour, minutes=moment.minute, seconds=moment.second)

    def _position(self, when: datetime) -> tuple[datetime, timedelta]:
        there = wall(when, zone(self.time_zone))
        return there, self._minute(there.weekday(), there.time()) + timedelta(
            microseconds=there.microsecond
        )

    def covers(self, when: datetime) -> bool:
        """Whether ``when``'s wall time (in the window's zone) is inside the window (asked
        of every slot a calendar lets through: integers, no timedelta built)."""
        there = wall(when, zone(self.time_zone))
        seconds = ((there.weekday() * 24 + there.hour) * 60 + there.minute) * 60 + there.second
        at = seconds * 1_000_000 + there.microsecond
        start = _week_us(self.start_day, self.start_time)
        end = _week_us(self.end_day, self.end_time)
        if start < end:
            return start <= at < end
        return at >= start or at < end

    def _boundary(self, when: datetime, day: int, moment: time, forward: bool) -> datetime:
        there, _at = self._position(when)
        target = self._minute(day, moment)
        monday = datetime.combine(there.date() - timedelta(days=there.weekday()), time())
        tz = zone(self.time_zone)
        for weeks in (-1, 0, 1, 2) if forward else (1, 0, -1, -2):
            for fold in (0, 1):
                naive = monday + target + WEEK * weeks
                candidate = naive.replace(tzinfo=tz, fold=fold).astimezone(UTC)
                if (candidate > when) if forward else (candidate <= when):
                    return candidate
        return when  # unreachable for a real window

    def end_after(self, when: datetime) -> datetime:
        """The first instant after ``when`` at which the window's end comes."""
        return self._boundary(when, self.end_day, self.end_time, forward=True)

    def start_before(self, when: datetime) -> datetime:
        """The last instant at or before ``when`` at which the window's start came."""
        return self._boundary(when, self.start_day, self.start_time, forward=False)

    def describe(self) -> str:
        span = (
            f"{WEEKDAY_NAMES[self.start_day]} {self.start_time:%H:%M} to "
            f"{WEEKDAY_NAMES[self.end_day]} {self.end_time:%H:%M} {self.time_zone}"
        )
        return f"{self.label} ({span})" if self.label else span


Window = Blackout | WeeklyWindow


def _whole_week(windows: Iterable[Window]) -> bool:
    """Whether the weekly windows of one zone cover its whole week between them: every
    instant has a wall time there, so none is left open."""
    by_zone: dict[str, list[tuple[timedelta, timedelta]]] = {}
    for window in windows:
        if not isinstance(window, WeeklyWindow):
            continue
        start = window._minute(window.start_day, window.start_time)
        end = window._minute(window.end_day, window.end_time)
        spans = [(start, end)] if start < end else [(start, WEEK), (timedelta(0), end)]
        by_zone.setdefault(window.time_zone, []).extend(spans)
    for spans in by_zone.values():
        reach = timedelta(0)
        for low, high in sorted(spans):
            if low > reach:
                break
            reach = max(reach, high)
        if reach >= WEEK:
            return True
    return False


# The language of holiday names (the package's default depends on the process's locale).
HOLIDAY_LANGUAGE = "en_US"


@dataclass(frozen=True)
class Calendar:
    """Excluded dates (with why: the holiday's name, or "excluded"), weekend days and
    blackout windows, under a name the preview and audit show."""

    name: str
    excluded: tuple[tuple[date, str], ...] = ()
    weekend: frozenset[int] = SATURDAY_AND_SUNDAY
    windows: tuple[Window, ...] = ()
    _by_date: Mapping[date, str] = field(init=False, repr=False, compare=False, hash=False)
    # Whether its weekly windows leave no instant open (a freeze over the whole week).
    always_closed: bool = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise CalendarError("a calendar needs a name")
        weekend = frozenset(self.weekend)
        if not weekend <= set(range(7)):
            raise CalendarError("weekend days are 0 (Monday) to 6 (Sunday)")
        if len(weekend) == 7:
            raise CalendarError(
                f"calendar {self.name!r} has no business day: its weekend is every day"
            )
        by_date = dict(self.excluded)
        object.__setattr__(self, "weekend", weekend)
        object.__setattr__(self, "excluded", tuple(sorted(by_date.items())))
        object.__setattr__(self, "_by_date", by_date)
        object.__setattr__(self, "always_closed", _whole_week(self.windows))

    @classmethod
    def of_holidays(
        cls,
        name: str,
        country: str,
        years: Iterable[int],
        *,
        subdivision: str | None = None,
        added: Iterable[date] = (),
        removed: Iterable[date] = (),
        weekend: Iterable[int] = SATURDAY_AND_SUNDAY,
        windows: Iterable[Window] = (),
    ) -> Calendar:
        """The public holidays of ``country`` (ISO 3166 code; ``subdivision``: a state,
        region or canton code) in ``years``, plus ``added`` dates, less ``removed`` ones.
        Their names are in English where the holidays package has them, else in the
        country's own language: whatever the process's locale."""
        span = sorted(set(years))
        if not span or span[-1] - span[0] >= MAX_YEARS:
            raise CalendarError(f"give from 1 to {MAX_YEARS} years of holidays")
        try:
            found = holidays.country_holidays(
                country, subdiv=subdivision, years=span, language=HOLIDAY_LANGUAGE
            )
        except NotImplementedError as exc:
            raise CalendarError(f"no holidays are known for {country!r}: {exc}") from None
        by_date = {day: str(title) for day, title in found.items()}
        by_date.update((day, "excluded") for day in added)
        for day in removed:
            by_date.pop(day, None)
        return cls(name, tuple(by_date.items()), frozenset(weekend), tuple(windows))

    def day_off(self, day: date) -> str | None:
        """Why ``day`` is not a business day ("holiday: <name>", "weekend"), or None."""
        title = self._by_date.get(day)
        if title is not None:
            return f"holiday: {title}" if title != "excluded" else "excluded date"
        if day.weekday() in self.weekend:
            return "weekend"
        return None

    def window_at(self, when: datetime) -> Window | None:
        """The first blackout window covering ``when``, if any."""
        for window in self.windows:
            if window.covers(when):
                return window
        return None


__all__ = ["Blackout", "Calendar", "WeeklyWindow", "Window"]
