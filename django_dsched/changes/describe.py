"""Human-readable timing of a schedule: "every 15 minutes", "At 09:00, Monday through
Friday (Europe/Brussels)", "once at 2026-12-01 09:00 UTC"."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

from cron_descriptor import CasingTypeEnum, FormatException, Options, get_description
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_dsched.enums import FrequencyUnit, ScheduleKind
from django_dsched.exceptions import CronError
from django_dsched.models import Schedule
from django_dsched.timetables.grid import ABSOLUTE_UNITS
from django_dsched.timetables.zones import zone as zone_named

# "every n <unit>", translated when used: one phrase per description, not all seven.
INTERVAL_PHRASES: dict[FrequencyUnit, Callable[[int], str]] = {
    FrequencyUnit.SECONDS: lambda n: ngettext("every second", "every %(n)d seconds", n),
    FrequencyUnit.MINUTES: lambda n: ngettext("every minute", "every %(n)d minutes", n),
    FrequencyUnit.HOURS: lambda n: ngettext("every hour", "every %(n)d hours", n),
    FrequencyUnit.DAYS: lambda n: ngettext("every day", "every %(n)d days", n),
    FrequencyUnit.WEEKS: lambda n: ngettext("every week", "every %(n)d weeks", n),
    FrequencyUnit.MONTHS: lambda n: ngettext("every month", "every %(n)d months", n),
    FrequencyUnit.YEARS: lambda n: ngettext("every year", "every %(n)d years", n),
}


def describe_interval(unit: str, n: int) -> str:
    return INTERVAL_PHRASES[FrequencyUnit(unit)](n) % {"n": n}


def describe_cron(expression: str) -> str:
    fields = expression.split()
    if len(fields) == 6:
        # croniter puts seconds last; cron-descriptor expects them first.
        fields = [fields[5], *fields[:5]]
    options = Options()
    options.use_24hour_time_format = True
    options.casing_type = CasingTypeEnum.Sentence
    try:
        description: str = get_description(" ".join(fields), options)
        return description
    except (FormatException, ValueError, IndexError):
        return expression


def zone_of(schedule: Schedule) -> tzinfo:
    """The zone a person reads ``schedule``'s times in: its own (UTC when it has none, or
    one this host does not know: such a row is set aside, and shown in UTC)."""
    try:
        return zone_named(schedule.time_zone or "UTC")
    except CronError:
        return UTC


def is_utc(zone: tzinfo) -> bool:
    return zone is UTC or str(zone) in ("UTC", "Etc/UTC")


def wall_text(moment: datetime, zone: tzinfo) -> str:
    """``moment`` on ``zone``'s wall clock: ``2026-12-31 09:00:00 AEDT``."""
    local = moment.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or zone}"


def both_times(moment: datetime, zone: tzinfo) -> str:
    """A schedule's time as people read it: on its zone's wall clock, then in UTC
    (``2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)``); a UTC schedule's once."""
    utc = wall_text(moment, UTC)
    return utc if is_utc(zone) else f"{wall_text(moment, zone)} ({utc})"


def describe(schedule: Schedule) -> str:
    text = _describe(schedule)
    if schedule.calendar_ids:  # its calendars, and what a day off does to a slot
        count = len(schedule.calendar_ids)
        text += ngettext(
            ", %(n)d calendar (%(policy)s)", ", %(n)d calendars (%(policy)s)", count
        ) % {"n": count, "policy": schedule.calendar_policy}
    return text


def _describe(schedule: Schedule) -> str:
    if schedule.schedule_kind == ScheduleKind.RRULE:
        return _("%(rule)s (%(zone)s)") % {
            "rule": " / ".join(schedule.rrule.splitlines()),
            "zone": schedule.time_zone,
        }
    if schedule.schedule_kind == ScheduleKind.CRON:
        return _("%(cron)s (%(zone)s)") % {
            "cron": describe_cron(schedule.cron_expression),
            "zone": schedule.time_zone,
        }
    if schedule.schedule_kind == ScheduleKind.ONCE:
        at: datetime | None = schedule.start_ts  # None on an unsaved form
        if at is None:
            return _("once")
        place = zone_of(schedule)
        when = both_times(at, place)
        if not is_utc(place):
            when = f"{when}, {schedule.time_zone}"
        return _("once at %(when)s") % {"when": when}
    if not schedule.frequency_unit or not schedule.frequency_time:
        return ""
    text = describe_interval(schedule.frequency_unit, schedule.frequency_time)
    zone = schedule.time_zone or "UTC"
    if schedule.frequency_unit not in ABSOLUTE_UNITS and zone != "UTC":
        # Days to years step this zone's wall clock.
        text = _("%(interval)s (%(zone)s)") % {"interval": text, "zone": zone}
    return text
