"""Writing business calendars (the admin and REST call these; so can code, and
``api.create_calendar`` / ``api.delete_calendar`` are these): a calendar with its blackout
windows saved whole, and a calendar deleted only when no live schedule uses it.

A calendar edit writes the calendar alone: its new version reaches every schedule using
it at its next plan (the fire path reads calendars by version, ``firing/calendared.py``),
and no schedule row is written. What the next plans will do shows in each schedule's
preview at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from django.core import exceptions as django_exceptions
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_dsched.changes import permissions
from django_dsched.conf import app_settings
from django_dsched.enums import LIVE, WindowKind
from django_dsched.exceptions import ValidationError
from django_dsched.models import Calendar, CalendarWindow, Schedule
from django_dsched.models.calendar import MAX_WINDOWS
from django_dsched.models.schedule import resolve_host
from django_dsched.timetables.calendars import Blackout, WeeklyWindow

# Names of the schedules using a calendar shown when its delete is refused.
SHOWN = 5


def users(calendar: Calendar | Any) -> Any:
    """The live schedules (active, paused, set aside) that use ``calendar`` (an instance or
    an id): a probe of the calendars' index."""
    calendar_id = getattr(calendar, "pk", calendar)
    return Schedule.objects.filter(calendar_ids__contains=[calendar_id], state__in=LIVE)


def save_calendar(calendar: Calendar, windows: Sequence[CalendarWindow] | None = None) -> Calendar:
    """Validate and save ``calendar`` (its public holidays computed for its years) and, when
    ``windows`` is given, replace its blackout windows by them (unsaved windows, at most
    :data:`MAX_WINDOWS`), in one transaction: validation errors write nothing."""
    if windows is not None and len(windows) > MAX_WINDOWS:
        raise ValidationError(
            {"windows": _("A calendar has at most %(most)d windows.") % {"most": MAX_WINDOWS}},
            code="too_many_windows",
        )
    try:
        calendar.full_clean()
        for window in windows or ():
            window.calendar = calendar
            window.full_clean(exclude=["calendar"])
    except django_exceptions.ValidationError as exc:  # as every other door's, dsched's own
        raise ValidationError(exc.message_dict, code="invalid_calendar") from None
    with transaction.atomic(using=app_settings.DATABASE):
        calendar.save()
        if windows is not None:
            CalendarWindow.objects.filter(calendar=calendar).delete()
            CalendarWindow.objects.bulk_create(list(windows))
            calendar.touch()
            calendar.refresh_from_db(fields=["version", "updated_ts"])
    return calendar


def _delete(calendar: Calendar) -> None:
    """Delete ``calendar`` and its windows; refused (:class:`ValidationError`) while a live
    schedule uses it (a schedule that ended keeps the id it had)."""
    with transaction.atomic(using=app_settings.DATABASE):
        locked = Calendar.objects.select_for_update().filter(pk=calendar.pk).first()
        if locked is None:
            return
        problem = in_use(locked)
        if problem:
            raise ValidationError(problem, code="calendar_in_use")
        locked.delete()


def in_use(calendar: Calendar) -> str:
    """Why ``calendar`` cannot be deleted (schedules use it), or ""."""
    names = list(
        users(calendar)
        .order_by("schedule_name")
        .values_list("schedule_name", flat=True)[: SHOWN + 1]
    )
    if not names:
        return ""
    shown = ", ".join(names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")
    return ngettext(
        "Schedule %(names)s uses this calendar: take it off first.",
        "Schedules %(names)s use this calendar: take it off them first.",
        len(names),
    ) % {"names": shown}


def create_calendar(
    name: str,
    *,
    country: str = "",
    subdivision: str = "",
    years: Iterable[int] = (),
    added: Iterable[date] = (),
    removed: Iterable[date] = (),
    weekend: Iterable[int] = (5, 6),
    windows: Iterable[Blackout | WeeklyWindow] = (),
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> Calendar:
    """A business calendar of ``host_id`` (default: the operator's, shared with every
    tenant): the public holidays of ``country`` (ISO 3166; ``subdivision``: a state or
    region) in ``years``, ``added`` days off, ``removed`` holidays, the ``weekend`` days (0
    is Monday) and blackout ``windows`` (:class:`~django_dsched.timetables.Blackout`,
    :class:`~django_dsched.timetables.WeeklyWindow`). Schedules use it with
    ``calendars=[...]``."""
    permissions.require(actor, permissions.ADD_CALENDARS)
    span = sorted(set(years))
    calendar = Calendar(
        name=name,
        host_id=resolve_host(host_id),
        country=country,
        subdivision=subdivision,
        first_year=span[0] if span else None,
        last_year=span[-1] if span else None,
        added_dates=list(added),
        removed_dates=list(removed),
        weekend_days=list(weekend),
    )
    return save_calendar(calendar, [_window(window) for window in windows])


def _window(window: Blackout | WeeklyWindow) -> CalendarWindow:
    if isinstance(window, WeeklyWindow):
        return CalendarWindow(
            kind=WindowKind.WEEKLY,
            label=window.label,
            start_day=window.start_day,
            start_time=window.start_time,
            end_day=window.end_day,
            end_time=window.end_time,
            time_zone=window.time_zone,
        )
    return CalendarWindow(
        kind=WindowKind.ONE_OFF, label=window.label, start_ts=window.start, end_ts=window.end
    )


def delete_calendar(calendar: Calendar, *, actor: Any = None) -> None:
    """Delete ``calendar``; refused (:class:`ValidationError`) while a live schedule uses
    it."""
    permissions.require(actor, permissions.DELETE_CALENDARS)
    _delete(calendar)


def windows_of(values: Iterable[dict[str, Any]]) -> list[CalendarWindow]:
    """Unsaved windows from their fields (the REST API's and code's)."""
    return [CalendarWindow(**fields) for fields in values]


__all__ = [
    "create_calendar",
    "delete_calendar",
    "in_use",
    "save_calendar",
    "users",
    "windows_of",
]
