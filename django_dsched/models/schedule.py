from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core import exceptions as django_exceptions
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Func, Value
from django.db.models.functions import Now
from django.db.models.lookups import Exact
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

from django_dsched.conf import app_settings
from django_dsched.enums import (
    FrequencyUnit,
    MisfirePolicy,
    ScheduleKind,
    ScheduleOrigin,
    ScheduleState,
    max_length_of,
)
from django_dsched.exceptions import CronError, ValidationError
from django_dsched.models import recurrence
from django_dsched.models.bucket_key import BucketKey
from django_dsched.models.conditions import OneOf, differs
from django_dsched.models.fields import EventDataField
from django_dsched.models.health import HEALTH_BOUNDS, MONITORED_INDEX, HealthOptions
from django_dsched.models.ids import uuid7
from django_dsched.models.overlap import OVERLAP_CONSTRAINTS, OverlapFields
from django_dsched.models.times import SCHEDULE_TIMES, in_range
from django_dsched.models.validators import (
    KEY_MAX_LENGTH,
    NAME_MAX_LENGTH,
    identifier_validator,
    validate_aware,
    validate_cron_expression,
    validate_event_data,
    validate_plain_text,
    validate_time_zone,
)
from django_dsched.runtime.clock import database_now
from django_dsched.timetables import Rules, Timetable, first_slot
from django_dsched.timetables.grid import period_is_acceptable

# The fields that place a schedule's slots; changing one moves next_run_ts.
GRID_FIELDS = (
    "schedule_kind",
    "frequency_unit",
    "frequency_time",
    "cron_expression",
    "time_zone",
    "start_ts",
    "jitter_seconds",
    *recurrence.RECURRENCE_FIELDS,
)
# The fields that bound a schedule; changing one may complete it.
BOUND_FIELDS = ("end_ts", "max_fires")
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"


def default_host_id() -> uuid.UUID:
    return app_settings.DEFAULT_HOST_ID


def resolve_host(host_id: uuid.UUID | str | None) -> uuid.UUID:
    """``host_id`` as a UUID; None means DSCHED_DEFAULT_HOST_ID."""
    value = default_host_id() if host_id is None else host_id
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def for_host(self, host_id: uuid.UUID | str) -> ScheduleQuerySet:
        return self.filter(host_id=host_id)

    def active(self) -> ScheduleQuerySet:
        return self.filter(active=True)

    def due(self) -> ScheduleQuerySet:
        """Active schedules whose next run is not after the database's now."""
        return self.filter(active=True, next_run_ts__lte=Now())


# The health thresholds: models/health.py; the overlap and failure policies: models/overlap.py;
# the recurrence rule and calendars: models/recurrence.py.
class Schedule(HealthOptions, OverlapFields, recurrence.RecurrenceFields):
    # Time-ordered (UUIDv7): see django_dsched/ids.py. Rows made before keep their ids.
    schedule_id = models.UUIDField(_("schedule id"), primary_key=True, default=uuid7)
    host_id = models.UUIDField(
        _("host id"), default=default_host_id, help_text=_("The tenant that owns the schedule.")
    )
    schedule_name = models.CharField(
        _("name"), max_length=NAME_MAX_LENGTH, validators=[validate_plain_text]
    )
    schedule_kind = models.CharField(
        _("kind"),
        max_length=max_length_of(ScheduleKind),
        choices=ScheduleKind.choices,
        default=ScheduleKind.INTERVAL,
        db_default=ScheduleKind.INTERVAL,
    )
    frequency_unit = models.CharField(
        _("frequency unit"),
        max_length=16,
        choices=FrequencyUnit.choices,
        blank=True,
        default="",
        db_default="",
        help_text=_("Interval schedules: the unit of the interval."),
    )
    frequency_time = models.IntegerField(
        _("every"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(2**31 - 1)],
        help_text=_("Interval schedules: how many units lie between two fires."),
    )
    cron_expression = models.CharField(
        _("cron expression"),
        max_length=128,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "Cron schedules: minute hour day-of-month month day-of-week, optionally a sixth "
            "field for seconds."
        ),
    )
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        default="UTC",
        db_default="UTC",
        validators=[validate_time_zone],
        help_text=_("IANA zone whose wall clock a cron expression follows."),
    )
    start_ts = models.DateTimeField(
        _("start"),
        blank=True,
        validators=[validate_aware],
        help_text=_(
            "Interval: the grid's anchor and first fire. One-shot: when it fires. Cron: no fire "
            "before this. Empty means now."
        ),
    )
    end_ts = models.DateTimeField(
        _("end"),
        null=True,
        blank=True,
        validators=[validate_aware],
        help_text=_("No fire after this time; the schedule completes."),
    )
    max_fires = models.IntegerField(
        _("fire limit"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("The schedule completes after this many fires."),
    )
    next_run_ts = models.DateTimeField(_("next run"), editable=False)
    next_slot_ts = models.DateTimeField(
        _("next slot"),
        editable=False,
        help_text=_("The slot the next fire is for (next run minus jitter)."),
    )
    misfire_policy = models.CharField(
        _("misfire policy"),
        max_length=max_length_of(MisfirePolicy),
        choices=MisfirePolicy.choices,
        default=MisfirePolicy.COALESCE,
        db_default=MisfirePolicy.COALESCE,
    )
    misfire_grace_seconds = models.IntegerField(
        _("misfire grace (s)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_(
            "A slot later than this counts as missed. Empty: no limit for fire-once and "
            "catch-up, DSCHED_MISFIRE_GRACE_SECONDS for skip."
        ),
    )
    catch_up_limit = models.IntegerField(
        _("catch-up limit"),
        default=100,
        db_default=100,
        validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text=_("Catch-up: the most missed slots fired; older ones are skipped."),
    )
    jitter_seconds = models.IntegerField(
        _("jitter (s)"),
        default=0,
        db_default=0,
        validators=[MinValueValidator(0), MaxValueValidator(86_400)],
        help_text=_("Each fire happens up to this much after its slot (a fixed spread)."),
    )
    priority = models.SmallIntegerField(
        _("priority"),
        default=0,
        db_default=0,
        validators=[MinValueValidator(-1000), MaxValueValidator(1000)],
        help_text=_("Among schedules due at the same moment, higher fires first."),
    )
    event_topic = models.CharField(
        _("topic"), max_length=NAME_MAX_LENGTH, validators=[identifier_validator]
    )
    event_type = models.CharField(
        _("event type"), max_length=NAME_MAX_LENGTH, validators=[identifier_validator]
    )
    event_data = EventDataField(
        _("event data"),
        default=dict,
        blank=True,
        validators=[validate_event_data],
        help_text=_("A JSON object carried as the data of every event this schedule fires."),
    )
    aggregate_version = models.BigIntegerField(
        _("version"), default=1, db_default=1, editable=False
    )
    active = models.BooleanField(_("active"), default=True, db_default=True, editable=False)
    state = models.CharField(
        _("state"),
        max_length=max_length_of(ScheduleState),
        choices=ScheduleState.choices,
        default=ScheduleState.ACTIVE,
        db_default=ScheduleState.ACTIVE,
        editable=False,
    )
    paused_reason = models.CharField(
        _("pause reason"), max_length=255, blank=True, default="", db_default=""
    )
    paused_until = models.DateTimeField(_("paused until"), null=True, blank=True, editable=False)
    set_aside_reason = models.TextField(
        _("set aside because"),
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text=_("Why the scheduler could not plan this schedule (state: set aside)."),
    )
    set_aside_ts = models.DateTimeField(_("set aside at"), null=True, blank=True, editable=False)
    origin = models.CharField(
        _("origin"),
        max_length=max_length_of(ScheduleOrigin),
        choices=ScheduleOrigin.choices,
        default=ScheduleOrigin.ADMIN,
        db_default=ScheduleOrigin.ADMIN,
        editable=False,
    )
    fire_count = models.BigIntegerField(_("fires"), default=0, db_default=0, editable=False)
    misfire_count = models.BigIntegerField(
        _("misfires"),
        default=0,
        db_default=0,
        editable=False,
        help_text=_("Times missed slots were skipped or coalesced."),
    )
    last_fired_ts = models.DateTimeField(_("last fired"), null=True, editable=False)
    # Its bucket: bucket_key & (DSCHED_BUCKETS - 1), computed by the database (cluster/buckets.py).
    bucket_key = models.GeneratedField(
        expression=BucketKey("schedule_id"),
        output_field=models.SmallIntegerField(),
        db_persist=True,
        verbose_name=_("bucket key"),
    )
    # NULL, not '': a schedule without a key is outside the partial unique index.
    idempotency_key = models.CharField(  # noqa: DJ001
        _("idempotency key"),
        max_length=KEY_MAX_LENGTH,
        null=True,
        blank=True,
        default=None,
        validators=[validate_plain_text],
        help_text=_(
            "Optional, unique per host: creating a schedule with a key that exists returns "
            "the existing schedule instead of a second one."
        ),
    )
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
            ("trigger_schedule", _("Can run schedules now")),
        ]
        indexes = [
            # The poll: active rows in (next_run_ts, priority DESC) order, a burst unsorted.
            models.Index(
                "next_run_ts",
                models.F("priority").desc(),
                condition=models.Q(active=True),
                name="dsched_schedule_due_idx",
            ),
            # The backlog host by host (firing/claim.py FAIR): each host's due rows a range.
            models.Index(
                fields=["host_id", "next_run_ts", "-priority"],
                condition=models.Q(active=True),
                name="dsched_schedule_host_due_idx",
            ),
            # Serves the auto-resume of schedules paused until a time, and the health counts.
            models.Index(
                fields=["paused_until"],
                condition=models.Q(state=ScheduleState.PAUSED),
                name="dsched_schedule_paused_idx",
            ),
            # The metrics' set-aside count (metrics/database.py): few rows, no fire writes.
            models.Index(
                fields=["set_aside_ts"],
                condition=models.Q(state=ScheduleState.SET_ASIDE),
                name="dsched_schedule_set_aside_idx",
            ),
            recurrence.CALENDARS_INDEX,
            MONITORED_INDEX,
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["host_id", "schedule_name"], name="dsched_schedule_name_unique"
            ),
            # Idempotent creates: one per (host, key); rows without a key are not indexed.
            models.UniqueConstraint(
                fields=["host_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="dsched_schedule_key_unique",
            ),
            models.CheckConstraint(
                condition=differs("idempotency_key", ""),
                name="dsched_schedule_key_not_empty",
                violation_error_message=_("An idempotency key must not be empty."),
            ),
            models.CheckConstraint(
                condition=models.Q(frequency_time__gt=0), name="dsched_schedule_frequency_positive"
            ),
            models.CheckConstraint(
                condition=OneOf("frequency_unit", [*FrequencyUnit.values, ""]),
                name="dsched_schedule_unit_valid",
            ),
            models.CheckConstraint(
                condition=OneOf("schedule_kind", ScheduleKind.values),
                name="dsched_schedule_kind_valid",
            ),
            models.CheckConstraint(
                condition=differs("schedule_kind", ScheduleKind.INTERVAL)
                | (models.Q(frequency_time__isnull=False) & differs("frequency_unit", "")),
                name="dsched_schedule_interval_complete",
            ),
            models.CheckConstraint(
                condition=differs("schedule_kind", ScheduleKind.CRON)
                | differs("cron_expression", ""),
                name="dsched_schedule_cron_complete",
            ),
            models.CheckConstraint(
                condition=OneOf("misfire_policy", MisfirePolicy.values),
                name="dsched_schedule_misfire_policy_valid",
            ),
            models.CheckConstraint(
                condition=OneOf("origin", ScheduleOrigin.values),
                name="dsched_schedule_origin_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(end_ts__gt=models.F("start_ts")),
                name="dsched_schedule_end_after_start",
            ),
            models.CheckConstraint(
                condition=models.Q(max_fires__gte=1),
                name="dsched_schedule_max_fires_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(catch_up_limit__gte=1, catch_up_limit__lte=10_000)
                & models.Q(jitter_seconds__gte=0, jitter_seconds__lte=86_400)
                & models.Q(misfire_grace_seconds__gte=0),
                name="dsched_schedule_timing_bounds",
            ),
            models.CheckConstraint(
                condition=OneOf("state", ScheduleState.values),
                name="dsched_schedule_state_valid",
            ),
            models.CheckConstraint(
                condition=Exact(models.F("active"), Exact(models.F("state"), ScheduleState.ACTIVE)),
                name="dsched_schedule_active_matches_state",
            ),
            models.CheckConstraint(
                condition=differs("schedule_name", ""), name="dsched_schedule_name_not_empty"
            ),
            models.CheckConstraint(
                condition=models.Q(event_topic__regex=IDENTIFIER_PATTERN),
                name="dsched_schedule_topic_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(event_type__regex=IDENTIFIER_PATTERN),
                name="dsched_schedule_type_valid",
            ),
            models.CheckConstraint(
                condition=Exact(
                    Func("event_data", function="jsonb_typeof", output_field=models.TextField()),
                    Value("object"),
                ),
                name="dsched_schedule_event_data_object",
            ),
            models.CheckConstraint(
                condition=in_range(*SCHEDULE_TIMES),
                name="dsched_schedule_times_in_range",
                violation_error_message=_(
                    "Every time of a schedule must fall in the years 1 to 9999."
                ),
            ),
            *OVERLAP_CONSTRAINTS,
            HEALTH_BOUNDS,
            *recurrence.RECURRENCE_CHECKS,
        ]

    def __str__(self) -> str:
        return self.schedule_name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.active = self.state == ScheduleState.ACTIVE
        if self.schedule_kind != ScheduleKind.INTERVAL:
            self.frequency_unit, self.frequency_time = "", None
        if self._state.adding and self.next_run_ts is None:
            if self.start_ts is None:  # type: ignore[unreachable]  # unset until saved
                self.start_ts = database_now()
            self.place(self.start_ts)
        super().save(*args, **kwargs)

    def full_clean(
        self,
        exclude: Iterable[str] | None = None,
        validate_unique: bool = True,
        validate_constraints: bool = True,
    ) -> None:
        # Django gathers the fields' errors into its own ValidationError; the package's
        # subclass carries the same messages (and is what every door of the package raises).
        try:
            super().full_clean(exclude, validate_unique, validate_constraints)
        except django_exceptions.ValidationError as exc:
            if isinstance(exc, ValidationError):
                raise
            raise ValidationError(exc) from None

    def clean(self) -> None:
        super().clean()
        errors: dict[str, StrOrPromise] = {}
        if self.schedule_kind == ScheduleKind.INTERVAL:
            if not self.frequency_unit:
                errors["frequency_unit"] = _("An interval schedule needs a frequency unit.")
            if self.frequency_time is None:
                errors["frequency_time"] = _("An interval schedule needs a frequency.")
            elif (
                self.frequency_unit in FrequencyUnit.values
                and self.frequency_time > 0
                and not period_is_acceptable(self.frequency_unit, self.frequency_time)
            ):
                errors["frequency_time"] = _("A schedule must fire at least once every 100 years.")
        elif self.schedule_kind == ScheduleKind.CRON:
            if not self.cron_expression.strip():
                errors["cron_expression"] = _("A cron schedule needs a cron expression.")
            else:
                try:
                    validate_cron_expression(self.cron_expression)
                except ValidationError as exc:
                    errors["cron_expression"] = exc.messages[0]
        if self.start_ts and self.end_ts and self.end_ts <= self.start_ts:
            # A one-shot's time is "at" in the Python and REST APIs, "start" in the admin's
            # form: the message names neither, so every door says the same thing.
            errors["end_ts"] = (
                _("The end must be after the time the one-shot fires.")
                if self.schedule_kind == ScheduleKind.ONCE
                else _("The end must be after the start.")
            )
        errors.update(self.recurrence_errors())
        if errors:
            raise ValidationError(errors)
        self._check_it_fires()

    def _check_it_fires(self) -> None:
        """A schedule whose timetable has no slot within its bounds is refused."""
        try:
            validate_aware(self.start_ts)
            validate_aware(self.end_ts)
        except ValidationError:
            return  # naive or out of range: reported by the fields' own validator
        if self.schedule_kind == ScheduleKind.ONCE:
            return
        start = self.start_ts or database_now()
        try:
            slot = first_slot(self.timetable(start), self.rules(), start)
        except (CronError, ValueError):
            return  # reported above
        if slot is None:
            raise ValidationError(
                _("This schedule would never fire (no slot between its start and its end)."),
                code="never_fires",
            )

    # -- timing ---------------------------------------------------------------------------
    def timetable(self, start: datetime | None = None) -> Timetable:
        return self.planned_timetable(start or self.start_ts)

    def rules(self) -> Rules:
        return Rules(
            policy=self.misfire_policy,
            grace_seconds=self.misfire_grace_seconds,
            catch_up_limit=self.catch_up_limit,
            start=self.start_ts,
            end=self.end_ts,
            max_fires=self.max_fires,
            jitter_seconds=self.jitter_seconds,
            jitter_key=self.schedule_id,
        )

    def place(self, not_before: datetime) -> None:
        """Put the next fire on the first slot that runs at or after ``not_before``.

        With no such slot within the bounds (a one-shot in the past is still due; a bounded
        schedule past its end, or one that reached its fire limit, is not) the schedule
        completes.
        """
        table = self.timetable()
        rules = self.rules()
        if self.schedule_kind == ScheduleKind.ONCE:
            slot: datetime | None = self.start_ts
        else:
            slot = first_slot(table, rules, not_before)
        if self.max_fires is not None and self.fire_count >= self.max_fires:
            slot = None
        if slot is None:
            self.state, self.active = ScheduleState.COMPLETED, False
            slot = self.next_slot_ts or self.start_ts
            self.next_slot_ts = self.next_run_ts = slot
            return
        self.next_slot_ts = slot
        self.next_run_ts = rules.run_time(table, slot)

    def rebound(self) -> None:
        """After a change of ``end_ts`` or ``max_fires``: complete the schedule if its next
        slot is no longer within its bounds (the slot itself does not move)."""
        past_end = self.end_ts is not None and self.next_slot_ts > self.end_ts
        spent = self.max_fires is not None and self.fire_count >= self.max_fires
        if past_end or spent:
            self.state, self.active = ScheduleState.COMPLETED, False

    def resumes_at(self, now: datetime) -> datetime:
        """Where a paused schedule goes on from: the end of its pause when it has one (the
        scheduler resumes it then, and the slot at that time fires), else now."""
        return self.paused_until if self.paused_until is not None else now

    def preview(self, count: int, now: datetime) -> list[datetime]:
        """The next ``count`` fire times, as they will fire: an active schedule from its next
        run on, a paused one from where it resumes; none for a finished one."""
        if self.state == ScheduleState.ACTIVE:
            return self.upcoming(count)
        if self.state == ScheduleState.PAUSED:
            resume = self.resumes_at(now)
            return self.upcoming(count, after=resume if self.next_slot_ts < resume else None)
        return []

    def upcoming(self, count: int, after: datetime | None = None) -> list[datetime]:
        """The next ``count`` fire times (slot plus jitter) from the next run on (or from
        the first slot running at or after ``after``).

        Computed by the same code that fires the schedule; bounds and fire limits apply.
        """
        table = self.timetable()
        rules = self.rules()
        slot: datetime | None = (
            self.next_slot_ts if after is None else first_slot(table, rules, after)
        )
        times: list[datetime] = []
        fires = self.fire_count
        while slot is not None and len(times) < count:
            if rules.end is not None and slot > rules.end:
                break
            if rules.max_fires is not None and fires >= rules.max_fires:
                break
            times.append(rules.run_time(table, slot))
            fires += 1
            slot = table.slot_after(slot)
        return times
