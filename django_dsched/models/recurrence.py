"""A schedule's recurrence rule and calendars: the fields (:class:`RecurrenceFields`, an
abstract model ``Schedule`` inherits), their CHECK constraints and index, and what they do
to its timetable and its preview.

* ``rrule``: an RFC 5545 recurrence (``RRULE``, with ``DTSTART``, ``RDATE`` and ``EXDATE``
  lines) for schedules of kind ``RRULE`` (:mod:`django_dsched.timetables.rrule`).
* ``calendar_ids``: the calendars (:mod:`.calendar`) that filter the schedule's slots, of
  any kind but a one-shot; NULL for none (so the fire path's claim reads nothing more for a
  plain schedule). ``calendar_policy``: what a slot on a day off becomes (``OMIT``,
  ``BACKWARD``, ``FORWARD``: :mod:`django_dsched.timetables.filtered`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.validators import MaxLengthValidator
from django.db import models
from django.db.models import Func
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual
from django.utils.translation import gettext_lazy as _

from django_dsched.enums import CalendarPolicy, ScheduleKind, max_length_of
from django_dsched.exceptions import RecurrenceError
from django_dsched.models.calendar import planning_calendars
from django_dsched.models.conditions import OneOf, differs
from django_dsched.timetables import Timetable, timetable_for
from django_dsched.timetables.calendars import Calendar as PlanningCalendar
from django_dsched.timetables.filtered import Filtered, fates, with_calendars
from django_dsched.timetables.rrule import check_recurrence

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from django_dsched.timetables import Rules

# The longest recurrence text (1,000 RDATEs and as many EXDATEs fit), and the most
# calendars a schedule names.
RRULE_MAX_LENGTH = 40_000
MAX_CALENDARS = 10
# The fields this module adds to a schedule; each places its slots (models.schedule's
# GRID_FIELDS): an edit of one moves the next run.
RECURRENCE_FIELDS = ("rrule", "calendar_ids", "calendar_policy")
# The most days off and blackout slots a preview lists between two fires.
PREVIEW_DROPPED = 20
INVALID_RULE = _("Invalid recurrence rule: %(error)s.")


class RecurrenceFields(models.Model):
    rrule = models.TextField(
        _("recurrence rule"),
        blank=True,
        default="",
        db_default="",
        validators=[MaxLengthValidator(RRULE_MAX_LENGTH)],
        help_text=_(
            "RRULE schedules: an RFC 5545 rule (FREQ=WEEKLY;INTERVAL=2;BYDAY=TU), or lines "
            "DTSTART:, RRULE:, RDATE:, EXDATE:. Times are wall times in the time zone (UTC "
            "with a Z); without DTSTART the start is DTSTART."
        ),
    )
    calendar_ids = ArrayField(
        models.UUIDField(),
        verbose_name=_("calendars"),
        null=True,
        blank=True,
        default=None,
        size=MAX_CALENDARS,
        help_text=_(
            "Business calendars that filter the slots: a slot on a day off is dropped or "
            "moved (the policy), a slot in a blackout window is dropped."
        ),
    )
    calendar_policy = models.CharField(
        _("on a day off"),
        max_length=max_length_of(CalendarPolicy),
        choices=CalendarPolicy.choices,
        default=CalendarPolicy.OMIT,
        db_default=CalendarPolicy.OMIT,
        help_text=_(
            "What a slot on a day that is not a business day (a weekend day, a holiday) of "
            "its calendars becomes."
        ),
    )

    if TYPE_CHECKING:
        schedule_kind: str
        frequency_unit: str
        frequency_time: int | None
        cron_expression: str
        time_zone: str
        start_ts: datetime

        def timetable(self, start: datetime | None = None) -> Timetable: ...
        def rules(self) -> Rules: ...
        def preview(self, count: int, now: datetime) -> list[datetime]: ...

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.normalize_recurrence()
        fields = kwargs.get("update_fields")
        if fields is not None and "schedule_kind" in fields and "rrule" not in fields:
            kwargs["update_fields"] = [*fields, "rrule"]
        super().save(*args, **kwargs)

    def recurrence_errors(self) -> dict[str, StrOrPromise]:
        """The rule's and the calendars' errors (``Schedule.clean``): the same message at
        every door, the rule checked in the schedule's zone from its start."""
        errors: dict[str, StrOrPromise] = {}
        if self.schedule_kind == ScheduleKind.RRULE:
            if not self.rrule.strip():
                errors["rrule"] = _("An RRULE schedule needs a recurrence rule.")
            else:
                try:
                    check_recurrence(self.rrule, self.time_zone, self.start_ts)
                except RecurrenceError as exc:
                    errors["rrule"] = INVALID_RULE % {"error": exc}
                except (TypeError, ValueError, OverflowError):
                    pass  # a bad zone or start: their fields say so
        if self.calendar_ids and self.schedule_kind == ScheduleKind.ONCE:
            errors["calendar_ids"] = _(
                "A one-shot fires at its time: calendars filter recurring schedules."
            )
        return errors

    def normalize_recurrence(self) -> None:
        """What a save stores: no rule for another kind; no calendar named twice, and NULL
        for none."""
        if self.schedule_kind != ScheduleKind.RRULE:
            self.rrule = ""
        if self.calendar_ids is not None:
            self.calendar_ids = list(dict.fromkeys(self.calendar_ids)) or None

    # -- calendars --------------------------------------------------------------------------
    def planning_calendars(self) -> list[PlanningCalendar]:
        """The schedule's calendars as the timetables plan with them (read once per
        instance and set of ids; :func:`.calendar.planning_calendars`)."""
        ids = tuple(self.calendar_ids or ())
        held = self.__dict__.get("_dsched_calendars")
        if held is None or held[0] != ids:
            held = (ids, planning_calendars(ids))
            self.__dict__["_dsched_calendars"] = held
        calendars: list[PlanningCalendar] = held[1]
        return calendars

    def attach_calendars(self, calendars: Sequence[PlanningCalendar]) -> None:
        """Use ``calendars`` (read by the caller, for the ids the schedule holds now)."""
        self.__dict__["_dsched_calendars"] = (tuple(self.calendar_ids or ()), list(calendars))

    def planned_timetable(self, start: datetime) -> Timetable:
        """The schedule's timetable from ``start`` (``Schedule.timetable``), filtered by its
        calendars."""
        table = timetable_for(
            self.schedule_kind,
            start=start,
            unit=self.frequency_unit,
            every=self.frequency_time,
            cron=self.cron_expression,
            time_zone=self.time_zone,
            rrule=self.rrule,
        )
        if not self.calendar_ids:
            return table
        return with_calendars(
            table, self.planning_calendars(), self.calendar_policy, self.time_zone
        )

    # -- the preview ------------------------------------------------------------------------
    def preview_slots(self, count: int, now: datetime) -> list[Upcoming]:
        """The next ``count`` fires as :meth:`preview` gives them (``fires``), the planned
        slots a calendar moved onto each (``shifted``: two slots moved onto one instant
        fire once), and the slots the calendars drop among and before them (``excluded``,
        at most :data:`PREVIEW_DROPPED` per gap)."""
        runs = self.preview(count, now)
        if not self.calendar_ids or not runs:
            return [Upcoming(run, run, "fires", "") for run in runs]
        table = self.timetable()
        assert isinstance(table, Filtered)
        slots = [table.slot_at_or_before(run) or run for run in runs]
        entries: list[Upcoming] = []
        for index, (slot, run) in enumerate(zip(slots, runs, strict=True)):
            low = min(now, slot) if index == 0 else slots[index - 1] + MICROSECOND
            entries += _dropped(table, low, slot)
            origins = table.origins(slot)
            entries += [
                Upcoming(fate.slot, run, "shifted", fate.describe())
                for fate in origins
                if fate.kind == "shifted"
            ]
            if not origins or any(fate.slot == slot for fate in origins):
                entries.append(Upcoming(slot, run, "fires", ""))
        return entries


MICROSECOND = timedelta(microseconds=1)


def _dropped(table: Filtered, start: datetime, end: datetime) -> list[Upcoming]:
    if end <= start:
        return []
    dropped = [fate for fate in fates(table, start, end) if fate.fires_at is None]
    return [Upcoming(fate.slot, None, "excluded", fate.describe()) for fate in dropped][
        :PREVIEW_DROPPED
    ]


@dataclass(frozen=True, slots=True)
class Upcoming:
    """A slot of a preview: when it was planned (``slot``), when it runs (``runs_at``:
    with its jitter, moved by a calendar; None when a calendar drops it), its ``fate``
    (``fires``, ``shifted`` or ``excluded``) and why, in words."""

    slot: datetime
    runs_at: datetime | None
    fate: str
    reason: str


def _cardinality(low: int, high: int) -> models.Q:
    count = Func("calendar_ids", function="cardinality", output_field=models.IntegerField())
    return models.Q(GreaterThanOrEqual(count, low), LessThanOrEqual(count, high))


RECURRENCE_CHECKS = [
    models.CheckConstraint(
        condition=differs("schedule_kind", ScheduleKind.RRULE) | differs("rrule", ""),
        name="dsched_schedule_rrule_complete",
        violation_error_message=_("An RRULE schedule needs a recurrence rule."),
    ),
    models.CheckConstraint(
        condition=OneOf("calendar_policy", CalendarPolicy.values) & _cardinality(1, MAX_CALENDARS),
        name="dsched_schedule_calendars_valid",
        violation_error_message=_(
            "A schedule names 1 to 10 calendars (or none), with OMIT, BACKWARD or FORWARD."
        ),
    ),
]
# Which live schedules use a calendar (a calendar in use is not deleted): plain schedules
# (calendar_ids NULL) are not in it, so their fires write nothing here.
CALENDARS_INDEX = GinIndex(
    fields=["calendar_ids"],
    condition=models.Q(calendar_ids__isnull=False),
    name="dsched_schedule_calendars_idx",
)

__all__ = [
    "CALENDARS_INDEX",
    "MAX_CALENDARS",
    "RECURRENCE_CHECKS",
    "RECURRENCE_FIELDS",
    "RRULE_MAX_LENGTH",
    "RecurrenceFields",
    "Upcoming",
]
