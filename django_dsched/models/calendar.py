"""Business calendars as data (``calendar_t``, ``calendar_window_t``): the days a business
does not work and the windows nothing may run, per tenant (``host_id``).

A :class:`Calendar` holds a name, public holidays of a country (or subdivision) for a span
of years, kept as dates when it is saved (:attr:`Calendar.holidays`: what the ``holidays``
package said then, so every process plans with the same days, whatever its version of the
package), dates added and removed by hand, the weekend days, and its blackout windows
(:class:`CalendarWindow`: one-off spans of instants, or weekly spans on a zone's wall clock).

Schedules name calendars by id (``Schedule.calendar_ids``): a tenant's schedule may use the
tenant's own calendars and the operator's (``DSCHED_DEFAULT_HOST_ID``'s), which are shared.
Every change bumps :attr:`Calendar.version`; :func:`planning_calendars` builds each
calendar's planning form (:class:`django_dsched.timetables.Calendar`) once per version and
process, so a calendar edit reaches the next plan of every schedule using it, without a
write to any schedule.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_dsched.conf import app_settings
from django_dsched.enums import WindowKind, max_length_of
from django_dsched.exceptions import CalendarError, ValidationError
from django_dsched.models.conditions import OneOf
from django_dsched.models.ids import uuid7
from django_dsched.models.times import in_range
from django_dsched.models.validators import (
    NAME_MAX_LENGTH,
    validate_plain_text,
    validate_time_zone,
)
from django_dsched.timetables.calendars import Blackout, WeeklyWindow, Window
from django_dsched.timetables.calendars import Calendar as PlanningCalendar

# The most years of holidays a calendar holds, dates it adds or removes by hand, and
# blackout windows it has: a calendar is read whole by every batch that plans a schedule
# using it.
MAX_YEARS = 50
MAX_DATES = 1000
MAX_WINDOWS = 100
WEEKDAYS = [
    (0, _("Monday")),
    (1, _("Tuesday")),
    (2, _("Wednesday")),
    (3, _("Thursday")),
    (4, _("Friday")),
    (5, _("Saturday")),
    (6, _("Sunday")),
]


def default_weekend() -> list[int]:
    return [5, 6]


def _host() -> uuid.UUID:
    return app_settings.DEFAULT_HOST_ID


class Calendar(models.Model):
    calendar_id = models.UUIDField(_("calendar id"), primary_key=True, default=uuid7)
    host_id = models.UUIDField(
        _("host id"),
        default=_host,
        help_text=_(
            "The tenant that owns the calendar. The operator's (DSCHED_DEFAULT_HOST_ID) are "
            "shared: every tenant's schedules may use them."
        ),
    )
    name = models.CharField(_("name"), max_length=NAME_MAX_LENGTH, validators=[validate_plain_text])
    country = models.CharField(
        _("holidays of"),
        max_length=8,
        blank=True,
        default="",
        help_text=_(
            "ISO 3166 country code whose public holidays are days off (BE, US, ...). Empty: "
            "no public holidays."
        ),
    )
    subdivision = models.CharField(
        _("subdivision"),
        max_length=16,
        blank=True,
        default="",
        help_text=_("A state, region or canton code of the country (CA for California, ...)."),
    )
    first_year = models.SmallIntegerField(
        _("from year"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1900), MaxValueValidator(9000)],
    )
    last_year = models.SmallIntegerField(
        _("to year"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1900), MaxValueValidator(9000)],
        help_text=_("The years of public holidays kept (at most 50); the country needs them."),
    )
    holidays = models.JSONField(
        _("public holidays"),
        default=list,
        blank=True,
        editable=False,
        help_text=_("[date, name] pairs, computed from the country and years when saved."),
    )
    added_dates = ArrayField(
        models.DateField(),
        verbose_name=_("days off added"),
        default=list,
        blank=True,
        size=MAX_DATES,
        help_text=_("More days off (comma-separated dates, 2026-12-24,2026-12-31)."),
    )
    removed_dates = ArrayField(
        models.DateField(),
        verbose_name=_("holidays worked"),
        default=list,
        blank=True,
        size=MAX_DATES,
        help_text=_("Public holidays that are business days after all (comma-separated)."),
    )
    weekend_days = ArrayField(
        models.SmallIntegerField(validators=[MinValueValidator(0), MaxValueValidator(6)]),
        verbose_name=_("weekend days"),
        default=default_weekend,
        blank=True,
        size=6,
        help_text=_("Days off every week: 0 is Monday, 6 Sunday (default 5,6). Empty: none."),
    )
    version = models.BigIntegerField(_("version"), default=1, db_default=1, editable=False)
    created_ts = models.DateTimeField(_("created"), db_default=Now(), editable=False)
    updated_ts = models.DateTimeField(_("updated"), db_default=Now(), editable=False)

    class Meta:
        db_table = "calendar_t"
        verbose_name = _("calendar")
        verbose_name_plural = _("calendars")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["host_id", "name"], name="dsched_calendar_name_unique"),
            models.CheckConstraint(
                condition=models.Q(last_year__gte=F("first_year"))
                & models.Q(last_year__lt=F("first_year") + MAX_YEARS),
                name="dsched_calendar_years",
                violation_error_message=_(
                    "The years run from the first to the last, at most 50 of them."
                ),
            ),
            models.CheckConstraint(
                condition=in_range("created_ts", "updated_ts"),
                name="dsched_calendar_times_in_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save with the public holidays of the country and years (none without a country),
        a new version, and the database's time."""
        self.weekend_days = sorted(set(self.weekend_days or ()))
        self.holidays = holidays_of(self) if self.country else []
        adding = self._state.adding
        self.updated_ts = Now()
        if not adding:
            self.version = F("version") + 1
        super().save(*args, **kwargs)
        self.refresh_from_db(fields=["version", "created_ts", "updated_ts"])

    def clean(self) -> None:
        super().clean()
        errors: dict[str, Any] = {}
        if len(set(self.weekend_days or ())) >= 7:
            errors["weekend_days"] = _("A calendar needs at least one business day a week.")
        if self.country:
            if self.first_year is None or self.last_year is None:
                errors["last_year"] = _("Give the years of public holidays to keep.")
            elif not 0 <= self.last_year - self.first_year < MAX_YEARS:
                errors["last_year"] = _(
                    "The years run from the first to the last, at most 50 of them."
                )
            else:
                try:
                    self.holidays = holidays_of(self)
                except CalendarError as exc:
                    errors["country"] = str(exc)
        elif self.subdivision:
            errors["subdivision"] = _("A subdivision needs its country.")
        if not self._state.adding and self._moved():
            # Schedules of other tenants may use it (an operator's calendar is shared).
            errors["host_id"] = _("A calendar cannot move to another host.")
        if errors:
            raise ValidationError(errors)

    def _moved(self) -> bool:
        """Whether this saved calendar's host differs from the stored one."""
        stored = (
            Calendar.objects.using(app_settings.DATABASE)
            .filter(pk=self.pk)
            .values_list("host_id", flat=True)
            .first()
        )
        return stored is not None and stored != self.host_id

    def touch(self) -> None:
        """A new version (its windows changed): the next plan reads it again."""
        Calendar.objects.filter(pk=self.pk).update(version=F("version") + 1, updated_ts=Now())

    def planning(self, windows: Iterable[CalendarWindow]) -> PlanningCalendar:
        """This calendar as the timetables plan with it (its ``windows``: its own)."""
        by_date = {date.fromisoformat(day): title for day, title in self.holidays or ()}
        by_date.update((day, "excluded") for day in self.added_dates or ())
        for day in self.removed_dates or ():
            by_date.pop(day, None)
        return PlanningCalendar(
            self.name,
            tuple(by_date.items()),
            frozenset(self.weekend_days or ()),
            tuple(window.planning() for window in windows),
        )


def holidays_of(calendar: Calendar) -> list[list[str]]:
    """The public holidays of ``calendar``'s country (and subdivision) in its years, as
    ``[iso date, name]`` pairs in date order; :class:`CalendarError` when unknown."""
    if calendar.first_year is None or calendar.last_year is None:
        raise CalendarError("give the years of public holidays to keep")
    found = PlanningCalendar.of_holidays(
        calendar.name or "calendar",
        calendar.country,
        range(calendar.first_year, calendar.last_year + 1),
        subdivision=calendar.subdivision or None,
    )
    return [[day.isoformat(), title] for day, title in found.excluded]


class CalendarWindow(models.Model):
    """A blackout window of a calendar: no slot of a schedule using the calendar fires in
    it, whatever the schedule's policy."""

    window_id = models.BigAutoField(_("window id"), primary_key=True)
    calendar = models.ForeignKey(
        Calendar,
        on_delete=models.CASCADE,
        related_name="windows",
        db_column="calendar_id",
        verbose_name=_("calendar"),
    )
    label = models.CharField(
        _("label"),
        max_length=200,
        blank=True,
        default="",
        validators=[validate_plain_text],
        help_text=_("What the preview and the audit say: release freeze, ..."),
    )
    kind = models.CharField(
        _("kind"),
        max_length=max_length_of(WindowKind),
        choices=WindowKind.choices,
        default=WindowKind.ONE_OFF,
    )
    start_ts = models.DateTimeField(_("from"), null=True, blank=True, help_text=_("Once."))
    end_ts = models.DateTimeField(_("until"), null=True, blank=True, help_text=_("Once."))
    start_day = models.SmallIntegerField(_("from day"), null=True, blank=True, choices=WEEKDAYS)
    start_time = models.TimeField(_("from time"), null=True, blank=True)
    end_day = models.SmallIntegerField(_("to day"), null=True, blank=True, choices=WEEKDAYS)
    end_time = models.TimeField(_("to time"), null=True, blank=True)
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        default="UTC",
        validators=[validate_time_zone],
        help_text=_("Weekly: the zone whose wall clock the days and times are read on."),
    )

    class Meta:
        db_table = "calendar_window_t"
        verbose_name = _("blackout window")
        verbose_name_plural = _("blackout windows")
        ordering = ["window_id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        kind=WindowKind.ONE_OFF,
                        start_ts__isnull=False,
                        end_ts__isnull=False,
                        end_ts__gt=F("start_ts"),
                    )
                    | models.Q(
                        kind=WindowKind.WEEKLY,
                        start_day__isnull=False,
                        end_day__isnull=False,
                        start_day__range=(0, 6),
                        end_day__range=(0, 6),
                        start_time__isnull=False,
                        end_time__isnull=False,
                    ),
                    OneOf("kind", WindowKind.values),
                ),
                name="dsched_window_complete",
                violation_error_message=_(
                    "A one-off window needs a start and a later end; a weekly one its days "
                    "(0 to 6) and times."
                ),
            ),
            models.CheckConstraint(
                condition=in_range("start_ts", "end_ts"),
                name="dsched_window_times_in_range",
            ),
        ]

    def __str__(self) -> str:
        try:
            return self.planning().describe()
        except (CalendarError, TypeError, ValueError):
            return self.label or str(self.kind)

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        self.calendar.touch()

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        calendar = self.calendar
        result = super().delete(*args, **kwargs)
        calendar.touch()
        return result

    def clean(self) -> None:
        super().clean()
        if self.kind == WindowKind.ONE_OFF:
            missing = [name for name in ("start_ts", "end_ts") if getattr(self, name) is None]
        else:
            missing = [
                name
                for name in ("start_day", "start_time", "end_day", "end_time")
                if getattr(self, name) is None
            ]
        if missing:
            raise ValidationError({name: _("This field is required.") for name in missing})
        try:
            self.planning()
        except CalendarError as exc:
            raise ValidationError(str(exc), code="invalid_window") from None

    def planning(self) -> Window:
        if self.kind == WindowKind.WEEKLY:
            assert self.start_day is not None and self.end_day is not None
            assert self.start_time is not None and self.end_time is not None
            return WeeklyWindow(
                self.start_day,
                self.start_time,
                self.end_day,
                self.end_time,
                self.time_zone,
                self.label,
            )
        assert self.start_ts is not None and self.end_ts is not None
        return Blackout(self.start_ts, self.end_ts, self.label)


# Each calendar's planning form and the version it was built from (per process). Bounded:
# past it, it starts again.
_BUILT: dict[uuid.UUID, tuple[int, PlanningCalendar]] = {}
BUILT_LIMIT = 4096


def planning_calendars(
    ids: Sequence[uuid.UUID | str], *, using: str | None = None
) -> list[PlanningCalendar]:
    """The calendars ``ids`` as the timetables plan with them, in that order
    (:func:`calendars_by_id`); :class:`CalendarError` names one that does not exist."""
    found = calendars_by_id(ids, using=using)
    for key in ids:
        if str(key) not in found:
            raise CalendarError(f"calendar {key} does not exist (it was deleted)")
    return [found[str(key)] for key in ids]


def calendars_by_id(
    ids: Iterable[uuid.UUID | str], *, using: str | None = None
) -> dict[str, PlanningCalendar]:
    """The calendars ``ids`` that exist, by the text of their id, as the timetables plan
    with them: one query for their versions, and one more (with their windows) for those
    changed since this process built them (a calendar edit reaches the next plan)."""
    wanted = {value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)) for value in ids}
    if not wanted:
        return {}
    database = using or app_settings.DATABASE
    versions = dict(
        Calendar.objects.using(database).filter(pk__in=wanted).values_list("pk", "version")
    )
    stale = [key for key, version in versions.items() if _BUILT.get(key, (None,))[0] != version]
    if stale:
        if len(_BUILT) + len(stale) > BUILT_LIMIT:
            _BUILT.clear()
        rows = Calendar.objects.using(database).filter(pk__in=stale).prefetch_related("windows")
        for row in rows:
            _BUILT[row.pk] = (row.version, row.planning(row.windows.all()))
    return {str(key): _BUILT[key][1] for key in versions if key in _BUILT}


__all__ = [
    "MAX_DATES",
    "MAX_WINDOWS",
    "MAX_YEARS",
    "Calendar",
    "CalendarWindow",
    "calendars_by_id",
    "holidays_of",
    "planning_calendars",
]
