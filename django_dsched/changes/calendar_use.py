"""Which calendars a schedule may use, asked by every door that writes one (creates, bulk
creates, edits, declarations, the admin's form, REST).

A schedule names calendars by id (``Schedule.calendar_ids``); callers may also give a
:class:`~django_dsched.models.Calendar` or a calendar's name (the Python API and
declarations), resolved here among the calendars the schedule's host may use: its own and
the operator's (``DSCHED_DEFAULT_HOST_ID``'s, shared with every tenant). A calendar of
another tenant is refused as one that does not exist, so its existence is not told.

:class:`CalendarUse` checks a schedule's calendars (one query per set of calendars and
host, per call: a bulk create of 10,000 schedules using one calendar asks once) and hands
the schedule their planning form, so validating and placing it reads nothing more.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.utils.translation import gettext as _

from django_dsched.conf import app_settings
from django_dsched.exceptions import CalendarError, ValidationError
from django_dsched.models import Calendar, Schedule
from django_dsched.models.calendar import planning_calendars
from django_dsched.models.recurrence import MAX_CALENDARS
from django_dsched.timetables.calendars import Calendar as PlanningCalendar

FIELD = "calendar_ids"


def usable_hosts(host: uuid.UUID) -> list[uuid.UUID]:
    """The hosts whose calendars a schedule of ``host`` may use: its own, the operator's."""
    operator = app_settings.DEFAULT_HOST_ID
    return [host] if host == operator else [host, operator]


def _refused(what: Any) -> ValidationError:
    return ValidationError(
        {
            FIELD: _("No calendar %(calendar)s that this schedule's host may use.")
            % {"calendar": what}
        },
        code="unknown_calendar",
    )


class CalendarUse:
    """Checks schedules' calendars for one call (a create, a bulk create, an edit)."""

    def __init__(self) -> None:
        self._names: dict[tuple[uuid.UUID, str], uuid.UUID] = {}
        self._checked: dict[tuple[uuid.UUID, tuple[uuid.UUID, ...]], list[PlanningCalendar]] = {}

    def prepare(self, schedule: Schedule) -> None:
        """Resolve ``schedule``'s calendars to ids (names and instances given by a caller),
        refuse any its host may not use or that does not exist, and give it their planning
        form. No calendars: nothing is read (and none is stored as NULL)."""
        given: Any = schedule.calendar_ids
        if not given:
            schedule.calendar_ids = None
            return
        if isinstance(given, str | Calendar) or not isinstance(given, Sequence):
            given = [given]
        if len(given) > MAX_CALENDARS:
            raise ValidationError(
                {FIELD: _("A schedule uses at most %(most)d calendars.") % {"most": MAX_CALENDARS}},
                code="too_many_calendars",
            )
        host = schedule.host_id
        ids = list(dict.fromkeys(self._id(host, value) for value in given))
        schedule.calendar_ids = ids
        key = (host, tuple(ids))
        calendars = self._checked.get(key)
        if calendars is None:
            allowed = set(
                Calendar.objects.using(app_settings.DATABASE)
                .filter(pk__in=ids, host_id__in=usable_hosts(host))
                .values_list("pk", flat=True)
            )
            for calendar_id in ids:
                if calendar_id not in allowed:
                    raise _refused(calendar_id)
            try:
                calendars = planning_calendars(ids)
            except CalendarError:  # deleted in between
                raise _refused(", ".join(map(str, ids))) from None
            self._checked[key] = calendars
        schedule.attach_calendars(calendars)

    def _id(self, host: uuid.UUID, value: Any) -> uuid.UUID:
        if isinstance(value, Calendar):
            return value.pk
        if isinstance(value, uuid.UUID):
            return value
        if not isinstance(value, str) or not value:
            raise _refused(repr(value))
        try:
            return uuid.UUID(value)
        except ValueError:
            return self._by_name(host, value)

    def _by_name(self, host: uuid.UUID, name: str) -> uuid.UUID:
        """The calendar named ``name`` that ``host`` may use: its own first."""
        key = (host, name)
        if key not in self._names:
            hosts = usable_hosts(host)
            found = sorted(
                Calendar.objects.using(app_settings.DATABASE)
                .filter(name=name, host_id__in=hosts)
                .values_list("host_id", "pk"),
                key=lambda row: hosts.index(row[0]),
            )
            if not found:
                raise _refused(repr(name))
            self._names[key] = found[0][1]
        return self._names[key]


def check_calendars(schedule: Schedule) -> None:
    """:meth:`CalendarUse.prepare` for one schedule (an edit, the admin's form)."""
    CalendarUse().prepare(schedule)


__all__ = ["CalendarUse", "check_calendars", "usable_hosts"]
