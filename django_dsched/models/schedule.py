from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Func, Value
from django.db.models.expressions import DatabaseDefault
from django.db.models.functions import Now
from django.db.models.lookups import Exact
from django.utils.translation import gettext_lazy as _

from ..conf import app_settings
from ..enums import FrequencyUnit, ScheduleState, max_length_of
from ..recurrence import Grid, period_is_acceptable
from ..validation import (
    NAME_MAX_LENGTH,
    identifier_validator,
    validate_aware,
    validate_event_data,
)

# The fields that place a schedule on its grid; changing one moves next_run_ts.
GRID_FIELDS = ("frequency_unit", "frequency_time", "start_ts")


def default_host_id() -> uuid.UUID:
    return app_settings.DEFAULT_HOST_ID


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def for_host(self, host_id: uuid.UUID | str) -> ScheduleQuerySet:
        return self.filter(host_id=host_id)

    def active(self) -> ScheduleQuerySet:
        return self.filter(active=True)

    def due(self) -> ScheduleQuerySet:
        """Active schedules whose next run is not after the database's now."""
        return self.filter(active=True, next_run_ts__lte=Now())


class Schedule(models.Model):
    schedule_id = models.UUIDField(_("schedule id"), primary_key=True, default=uuid.uuid4)
    host_id = models.UUIDField(
        _("host id"), default=default_host_id, help_text=_("The tenant that owns the schedule.")
    )
    schedule_name = models.CharField(_("name"), max_length=NAME_MAX_LENGTH)
    frequency_unit = models.CharField(
        _("frequency unit"),
        max_length=16,
        choices=FrequencyUnit.choices,
        default=FrequencyUnit.MINUTES,
    )
    frequency_time = models.IntegerField(
        _("every"),
        validators=[MinValueValidator(1), MaxValueValidator(2**31 - 1)],
        help_text=_("How many frequency units lie between two fires."),
    )
    start_ts = models.DateTimeField(
        _("start"),
        db_default=Now(),
        blank=True,
        validators=[validate_aware],
        help_text=_("Anchor of the schedule's grid and its first fire. Empty means now."),
    )
    next_run_ts = models.DateTimeField(_("next run"), db_default=Now(), editable=False)
    event_topic = models.CharField(
        _("topic"), max_length=NAME_MAX_LENGTH, validators=[identifier_validator]
    )
    event_type = models.CharField(
        _("event type"), max_length=NAME_MAX_LENGTH, validators=[identifier_validator]
    )
    event_data = models.JSONField(
        _("event data"),
        default=dict,
        blank=True,
        validators=[validate_event_data],
        help_text=_("A JSON object carried as the data of every event this schedule fires."),
    )
    aggregate_version = models.BigIntegerField(_("version"), default=1, editable=False)
    active = models.BooleanField(_("active"), default=True, editable=False)
    state = models.CharField(
        _("state"),
        max_length=max_length_of(ScheduleState),
        choices=ScheduleState.choices,
        default=ScheduleState.ACTIVE,
        editable=False,
    )
    fire_count = models.BigIntegerField(_("fires"), default=0, editable=False)
    last_fired_ts = models.DateTimeField(_("last fired"), null=True, editable=False)
    created_ts = models.DateTimeField(_("created"), db_default=Now(), editable=False)
    updated_ts = models.DateTimeField(_("updated"), db_default=Now(), editable=False)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        db_table = "schedule_t"
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["next_run_ts"]
        permissions = [
            ("pause_schedule", _("Can pause and resume schedules")),
            ("cancel_schedule", _("Can cancel schedules")),
        ]
        indexes = [
            # Serves the leader's poll: active rows in next_run_ts order.
            models.Index(
                fields=["next_run_ts"],
                condition=models.Q(active=True),
                name="dsched_schedule_due_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["host_id", "schedule_name"], name="dsched_schedule_name_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(frequency_time__gt=0), name="dsched_schedule_frequency_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(frequency_unit__in=FrequencyUnit.values),
                name="dsched_schedule_unit_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=ScheduleState.values),
                name="dsched_schedule_state_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(active=True, state=ScheduleState.ACTIVE)
                | (models.Q(active=False) & ~models.Q(state=ScheduleState.ACTIVE)),
                name="dsched_schedule_active_matches_state",
            ),
            models.CheckConstraint(
                condition=~models.Q(schedule_name=""), name="dsched_schedule_name_not_empty"
            ),
            models.CheckConstraint(
                condition=models.Q(event_topic__regex=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"),
                name="dsched_schedule_topic_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(event_type__regex=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"),
                name="dsched_schedule_type_valid",
            ),
            models.CheckConstraint(
                condition=Exact(
                    Func("event_data", function="jsonb_typeof", output_field=models.TextField()),
                    Value("object"),
                ),
                name="dsched_schedule_event_data_object",
            ),
        ]

    def __str__(self) -> str:
        return self.schedule_name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.active = self.state == ScheduleState.ACTIVE
        adding = self._state.adding
        if adding:
            if self.start_ts is None:
                self.start_ts = DatabaseDefault()
            if self.next_run_ts is None or isinstance(self.next_run_ts, DatabaseDefault):
                # The first fire is at the anchor; a database default reads the same now().
                self.next_run_ts = self.start_ts
        super().save(*args, **kwargs)
        if adding and isinstance(self.start_ts, DatabaseDefault | Now):
            self.refresh_from_db(fields=["start_ts", "next_run_ts", "created_ts", "updated_ts"])

    def clean(self) -> None:
        super().clean()
        if (
            self.frequency_unit in FrequencyUnit.values
            and isinstance(self.frequency_time, int)
            and self.frequency_time > 0
        ) and not period_is_acceptable(self.frequency_unit, self.frequency_time):
            raise ValidationError(
                {"frequency_time": _("A schedule must fire at least once every 100 years.")},
                code="period_too_long",
            )

    @property
    def grid(self) -> Grid:
        return Grid(self.frequency_unit, self.frequency_time, self.start_ts)
