"""What the API reads and writes.

Input serializers check types and shapes only; the rules are the model's and the
services' (the Python API's own checks and messages), mapped onto these field names by
:data:`API_NAMES`. Unknown fields are refused, so a typo is a 400, not a silent default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.changes.creates import MAX_DELAY
from django_dsched.changes.describe import describe
from django_dsched.changes.specs import OPTIONS
from django_dsched.enums import (
    DeliveryStatus,
    FrequencyUnit,
    MisfirePolicy,
    RunStatus,
    ScheduleKind,
    ScheduleOrigin,
    ScheduleState,
)
from django_dsched.exceptions import ValidationError as DschedValidationError
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.models.validators import KEY_MAX_LENGTH, NAME_MAX_LENGTH, validate_aware
from django_dsched.outbox import phases
from django_dsched.runtime.clock import database_now

# The API's name of each writable field -> the model's.
MODEL_FIELDS: Mapping[str, str] = {
    "name": "schedule_name",
    "kind": "schedule_kind",
    "every": "frequency_time",
    "unit": "frequency_unit",
    "cron": "cron_expression",
    "time_zone": "time_zone",
    "start": "start_ts",
    **OPTIONS,  # the options every kind takes, named as in the Python API
    "topic": "event_topic",
    "event_type": "event_type",
    "data": "event_data",
    "key": "idempotency_key",
}
# The model's field -> the API's (for the model's validation errors).
API_NAMES: Mapping[str, str] = {model: api for api, model in MODEL_FIELDS.items()}
# A one-shot's time is ``at`` (or ``delay`` from now), as in the Python API: its start_ts
# errors are about ``at``.
ONCE_NAMES: Mapping[str, str] = {**API_NAMES, "start_ts": "at"}


def api_names(kind: str | None) -> Mapping[str, str]:
    """The model's field -> the API's, for a schedule of ``kind``."""
    return ONCE_NAMES if kind == ScheduleKind.ONCE else API_NAMES


# The longest ``delay`` of a one-shot, in seconds (the Python API's bound: 100 years).
MAX_DELAY_SECONDS = int(MAX_DELAY.total_seconds())
START_OF_ONCE = _(
    "A one-shot (ONCE) fires at `at` (a time), or after `delay` (seconds from now): send at "
    "instead of start."
)
ONLY_ONCE = _(
    "%(field)s is for one-shot (ONCE) schedules; an interval or cron schedule starts at start."
)
AT_AND_DELAY = _("Give at or delay, not both.")
NO_TIME = _("A one-shot (ONCE) needs its time: at (a time), or delay (seconds from now).")
# Stored as "" when unset; null in the API.
BLANK_AS_NULL = ("unit", "cron")
INT32 = 2**31 - 1
# The identifier rule of validation.identifier_validator, in a regex every client reads.
IDENTIFIER_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:/-]*$"


NAIVE = _("Give a timezone-aware time (with an offset or a zone).")  # validate_aware's


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an offset (a naive time is refused, as by the Python API); output in UTC."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            format="iso-8601", input_formats=["iso-8601"], default_timezone=UTC, **kwargs
        )

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            raise serializers.ValidationError(NAIVE)
        aware: datetime = super().enforce_timezone(value)  # in UTC (or "out of range")
        try:
            validate_aware(aware)  # the model's rule: within the supported times
        except DschedValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None
        return aware


# The years a time sent to the API may be written in. The supported times are from 1900-01-01
# to before 9000-01-01 UTC (models.validators.SUPPORTED_TIMES); with any offset (under 24
# hours), a time written in 1901 to 8998 is within them, and a pattern can say so: the
# schema and the server then agree on every time, whatever its offset.
FIRST_YEAR, LAST_YEAR = 1901, 8998
YEAR_PATTERN = (
    "^(190[1-9]|19[1-9][0-9]|[2-7][0-9]{3}|8[0-8][0-9]{2}|89[0-8][0-9]|899[0-8])-[0-9]{2}-[0-9]{2}T"
)
_YEAR = re.compile(YEAR_PATTERN)
OUT_OF_YEARS = _("Give a time written in the years %(first)d to %(last)d.")


@extend_schema_field({"type": "string", "format": "date-time", "pattern": YEAR_PATTERN})
class InputTimeField(AwareDateTimeField):
    """A time the client sends: as :class:`AwareDateTimeField`, written in the years
    :data:`FIRST_YEAR` to :data:`LAST_YEAR` (what the schema's pattern says)."""

    def to_internal_value(self, value: Any) -> datetime:
        if isinstance(value, str) and not _YEAR.match(value):
            if value[:4].isdigit() and _YEAR.match("2000" + value[4:]):
                raise serializers.ValidationError(
                    OUT_OF_YEARS % {"first": FIRST_YEAR, "last": LAST_YEAR}
                )
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss[.uuuuuu]]+HH:MM")
        parsed: datetime = super().to_internal_value(value)
        return parsed


# JSON bodies are typed: DRF's fields would also take 5 for a name, "5" or 5.0 for a
# number, 0 for false and 7 for a UUID, which the schema (and a careful client) does not.


class Text(serializers.CharField):
    """A JSON string (DRF's CharField would also take a number)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value: str = super().to_internal_value(data)
        return value


class Integer(serializers.IntegerField):
    """A JSON integer (not a string, a float or a boolean)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        value: int = super().to_internal_value(data)
        return value


class Boolean(serializers.BooleanField):
    """true or false (not 0, 1, "yes" or "on")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class UUIDText(serializers.UUIDField):
    """A UUID in a JSON string (DRF's UUIDField would also take an integer)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=str(data)[:50])
        return super().to_internal_value(data)


@extend_schema_field(
    {"type": "string", "pattern": IDENTIFIER_PATTERN, "maxLength": NAME_MAX_LENGTH}
)
class IdentifierField(Text):
    """A topic or event type; its rule is checked by the model (same message as the Python API)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=NAME_MAX_LENGTH, trim_whitespace=False, **kwargs)


@extend_schema_field(OpenApiTypes.OBJECT)
class ObjectField(serializers.JSONField):
    """A JSON object (event data, payloads); the model checks it is one, its size and depth."""


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields (and query parameters) it does not know: a typo would otherwise be
    silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key[:100]: [_("This field does not exist.")] for key in unknown[:20]}
                )
        return super().to_internal_value(data)


# -- schedules -------------------------------------------------------------------------------


class ScheduleInputSerializer(StrictSerializer):
    """A schedule's definition (create, replace with PUT, change with PATCH)."""

    name = Text(max_length=NAME_MAX_LENGTH, trim_whitespace=False)
    kind = serializers.ChoiceField(ScheduleKind.choices)
    every = Integer(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=INT32,
        help_text=_("Interval schedules: how many units lie between two fires."),
    )
    unit = serializers.ChoiceField(
        FrequencyUnit.choices,
        required=False,
        allow_null=True,
        help_text=_("Interval schedules: the unit of the interval."),
    )
    cron = Text(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=128,
        trim_whitespace=False,
        help_text=_("Cron schedules: five fields, or six with seconds last."),
    )
    time_zone = Text(
        required=False,
        max_length=64,
        trim_whitespace=False,
        help_text=_("IANA zone whose wall clock a cron expression follows (default UTC)."),
    )
    start = InputTimeField(
        required=False,
        allow_null=True,
        help_text=_(
            "Interval: the grid's anchor and first fire. Cron: no fire before this. Default: "
            "now. Not for a one-shot (ONCE): its time is `at` or `delay`."
        ),
    )
    at = InputTimeField(
        required=False,
        help_text=_("One-shot (ONCE) schedules: when it fires. Or give `delay`."),
    )
    delay = Integer(
        required=False,
        min_value=0,
        max_value=MAX_DELAY_SECONDS,
        help_text=_(
            "One-shot (ONCE) schedules: fire this many seconds from now (the database's "
            "clock), instead of at a time (`at`)."
        ),
    )
    end = InputTimeField(
        required=False,
        allow_null=True,
        help_text=_("No fire after this time; the schedule completes."),
    )
    max_fires = Integer(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=INT32,
        help_text=_("The schedule completes after this many fires."),
    )
    misfire_policy = serializers.ChoiceField(MisfirePolicy.choices, required=False)
    misfire_grace_seconds = Integer(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=INT32,
        help_text=_("A slot later than this counts as missed."),
    )
    catch_up_limit = Integer(required=False, min_value=1, max_value=10_000)
    jitter_seconds = Integer(required=False, min_value=0, max_value=86_400)
    priority = Integer(required=False, min_value=-1000, max_value=1000)
    topic = IdentifierField()
    event_type = IdentifierField()
    data = ObjectField(  # type: ignore[assignment]  # a field named data (not .data)
        required=False,
        help_text=_("A JSON object carried as the data of every event the schedule fires."),
    )
    host_id = UUIDText(
        required=False,
        help_text=_("The tenant; one of the hosts the request may reach (default: the first)."),
    )
    key = Text(
        required=False,
        allow_null=True,
        max_length=KEY_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_(
            "Idempotency key, unique per host: a create with a key that exists answers 200 "
            "with the existing schedule (unchanged) instead of creating a second one."
        ),
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The one-shot's time is ``at`` or ``delay`` (as in the Python API); the other
        kinds' is ``start``. The kind is the one sent, else (an edit) ``context["kind"]``,
        the schedule's; a create of a one-shot needs its time."""
        kind = attrs.get("kind", self.context.get("kind"))
        errors: dict[str, Any] = {}
        if kind == ScheduleKind.ONCE:
            if "start" in attrs:
                errors["start"] = [START_OF_ONCE]
            elif "at" in attrs and "delay" in attrs:
                errors["delay"] = [AT_AND_DELAY]
            elif "kind" not in self.context and "at" not in attrs and "delay" not in attrs:
                errors["at"] = [NO_TIME]
        else:
            for name in ("at", "delay"):
                if name in attrs:
                    errors[name] = [ONLY_ONCE % {"field": name}]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def model_values(
    validated: Mapping[str, Any], now: Callable[[], datetime] | None = None
) -> dict[str, Any]:
    """Validated API fields as model fields (``host_id`` is not among them). A one-shot's
    ``at`` is its start; ``delay`` is ``now()`` (the database's clock) plus the delay."""
    values = {}
    for name, value in validated.items():
        if name in MODEL_FIELDS:
            values[MODEL_FIELDS[name]] = "" if value is None and name in BLANK_AS_NULL else value
    if "at" in validated:
        values["start_ts"] = validated["at"]
    elif "delay" in validated:
        values["start_ts"] = (now or database_now)() + timedelta(seconds=validated["delay"])
    return values


def definition_defaults() -> dict[str, Any]:
    """The model's default of each writable field but ``start`` and ``key`` (what a PUT
    resets: a schedule keeps its start, and the idempotency key it was created with)."""
    fields = {f.name: f for f in Schedule._meta.get_fields() if hasattr(f, "get_default")}
    return {
        model: fields[model].get_default()
        for api, model in MODEL_FIELDS.items()
        if api not in ("start", "key")
    }


class ScheduleSerializer(serializers.Serializer[Schedule]):
    id = serializers.UUIDField(source="schedule_id", read_only=True)
    host_id = serializers.UUIDField(read_only=True)
    name = serializers.CharField(source="schedule_name", read_only=True)
    kind = serializers.ChoiceField(ScheduleKind.choices, source="schedule_kind", read_only=True)
    every = serializers.IntegerField(source="frequency_time", read_only=True, allow_null=True)
    unit = serializers.ChoiceField(
        FrequencyUnit.choices, source="frequency_unit", read_only=True, allow_null=True
    )
    cron = serializers.CharField(source="cron_expression", read_only=True, allow_null=True)
    time_zone = serializers.CharField(read_only=True)
    start = serializers.SerializerMethodField(
        help_text=_(
            "Interval: the grid's anchor and first fire. Cron: no fire before this. Null for "
            "a one-shot (ONCE): see at."
        )
    )
    at = serializers.SerializerMethodField(
        help_text=_("One-shot (ONCE): when it fires. Null for interval and cron schedules.")
    )
    end = AwareDateTimeField(source="end_ts", read_only=True, allow_null=True)
    max_fires = serializers.IntegerField(read_only=True, allow_null=True)
    misfire_policy = serializers.ChoiceField(MisfirePolicy.choices, read_only=True)
    misfire_grace_seconds = serializers.IntegerField(read_only=True, allow_null=True)
    catch_up_limit = serializers.IntegerField(read_only=True)
    jitter_seconds = serializers.IntegerField(read_only=True)
    priority = serializers.IntegerField(read_only=True)
    topic = serializers.CharField(source="event_topic", read_only=True)
    event_type = serializers.CharField(read_only=True)
    key = serializers.CharField(source="idempotency_key", read_only=True, allow_null=True)
    data = ObjectField(  # type: ignore[assignment]  # the field, not .data
        source="event_data", read_only=True
    )
    state = serializers.ChoiceField(ScheduleState.choices, read_only=True)
    paused_reason = serializers.CharField(read_only=True)
    paused_until = AwareDateTimeField(read_only=True, allow_null=True)
    origin = serializers.ChoiceField(ScheduleOrigin.choices, read_only=True)
    version = serializers.IntegerField(
        source="aggregate_version",
        read_only=True,
        help_text=_("+1 per fire and per change; the ETag, to send back in If-Match."),
    )
    fire_count = serializers.IntegerField(read_only=True)
    misfire_count = serializers.IntegerField(read_only=True)
    last_fired = AwareDateTimeField(source="last_fired_ts", read_only=True, allow_null=True)
    next_run = serializers.SerializerMethodField(
        help_text=_("When the next fire is due (null unless active or paused).")
    )
    description = serializers.SerializerMethodField(help_text=_("The timing in words."))
    created = AwareDateTimeField(source="created_ts", read_only=True)
    updated = AwareDateTimeField(source="updated_ts", read_only=True)

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_start(self, schedule: Schedule) -> str | None:
        if schedule.schedule_kind == ScheduleKind.ONCE:
            return None
        value: str | None = AwareDateTimeField().to_representation(schedule.start_ts)
        return value

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_at(self, schedule: Schedule) -> str | None:
        if schedule.schedule_kind != ScheduleKind.ONCE:
            return None
        value: str | None = AwareDateTimeField().to_representation(schedule.start_ts)
        return value

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_next_run(self, schedule: Schedule) -> str | None:
        if schedule.state not in (ScheduleState.ACTIVE, ScheduleState.PAUSED):
            return None
        value: str | None = AwareDateTimeField().to_representation(schedule.next_run_ts)
        return value

    def get_description(self, schedule: Schedule) -> str:
        return describe(schedule)

    def to_representation(self, instance: Schedule) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        for name in BLANK_AS_NULL:
            if data[name] == "":
                data[name] = None
        return data


class ScheduleDetailSerializer(ScheduleSerializer):
    next_fires = serializers.ListField(
        child=AwareDateTimeField(),
        read_only=True,
        help_text=_("The next fire times, computed by the code that fires the schedule."),
    )


class ScheduleListQuery(StrictSerializer):
    state = serializers.ChoiceField(ScheduleState.choices, required=False)
    kind = serializers.ChoiceField(ScheduleKind.choices, required=False)
    # Query filters match what is sent, whitespace included (DRF would trim " " to a blank
    # value and refuse it, where the schema takes it).
    topic = serializers.CharField(required=False, max_length=NAME_MAX_LENGTH, trim_whitespace=False)
    event_type = serializers.CharField(
        required=False, max_length=NAME_MAX_LENGTH, trim_whitespace=False
    )
    key = serializers.CharField(
        required=False,
        max_length=KEY_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_("An idempotency key (exact match)."),
    )
    name = serializers.CharField(
        required=False,
        max_length=NAME_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_("A name (exact match; unique per host)."),
    )
    search = serializers.CharField(
        required=False,
        max_length=NAME_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_("Part of the name."),
    )


class StatusQuery(StrictSerializer):
    key = Text(
        max_length=KEY_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_("The schedule's idempotency key."),
    )
    host_id = UUIDText(
        required=False,
        help_text=_(
            "The host whose schedule has the key; one the request may reach (default: the first)."
        ),
    )


# A delayed message's status: its newest fire's delivery, or the state of a schedule that
# will never fire and has no message (api.Status.message_status).
MESSAGE_STATUSES = [
    *DeliveryStatus.values,
    ScheduleState.CANCELLED.value,
    ScheduleState.COMPLETED.value,
]


class ScheduleStatusSerializer(serializers.Serializer[Any]):
    """Where a schedule stands, read with its newest message (as api.status gives it)."""

    id = serializers.UUIDField(source="schedule_id")
    name = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(ScheduleState.choices)
    message_status = serializers.ChoiceField(
        MESSAGE_STATUSES,
        help_text=_(
            "A delayed message's status. PENDING: not fired yet (and it will), or fired and "
            "not yet delivered. DELIVERED or DELIVERY_FAILED: its newest fire's delivery. "
            "CANCELLED or COMPLETED: it will never fire and has no message."
        ),
    )
    next_run = AwareDateTimeField(
        source="next_fire",
        allow_null=True,
        help_text=_("When the next fire is due (null unless active or paused)."),
    )
    last_fired = AwareDateTimeField(allow_null=True)
    last_delivery = serializers.ChoiceField(
        DeliveryStatus.choices,
        allow_null=True,
        help_text=_("The newest message's delivery status (null: no message yet)."),
    )
    last_run = serializers.ChoiceField(
        RunStatus.choices,
        allow_null=True,
        help_text=_("Where the newest message's run stands (null: no message yet)."),
    )
    last_error = serializers.CharField(allow_blank=True)
    fire_count = serializers.IntegerField()
    misfire_count = serializers.IntegerField()
    paused_reason = serializers.CharField(allow_blank=True)
    paused_until = AwareDateTimeField(allow_null=True)
    set_aside_reason = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField(help_text=_("+1 per fire and per change."))


# -- bulk ------------------------------------------------------------------------------------


# The bulk answers are built as dicts (rest/bulk.py: 10,000 items); these describe them.


class BulkCreatedSerializer(serializers.Serializer[Any]):
    """One item's schedule in a bulk create's answer (read it for all its fields). An
    existing item's result gives only `outcome`, `id`, `host_id` and `key` to a
    caller who may not view schedules."""

    outcome = serializers.ChoiceField(
        ["created", "existing"],
        help_text=_("created: new. existing: its key was known; the schedule is as it was."),
    )
    id = serializers.UUIDField()
    host_id = serializers.UUIDField()
    key = serializers.CharField(allow_null=True)
    # Left out of an existing item's result for a caller who may not view schedules.
    name = serializers.CharField(required=False)
    kind = serializers.ChoiceField(ScheduleKind.choices, required=False)
    state = serializers.ChoiceField(ScheduleState.choices, required=False)
    next_run = AwareDateTimeField(
        required=False,
        allow_null=True,
        help_text=_("When the next fire is due (null unless active or paused)."),
    )
    version = serializers.IntegerField(required=False)


class ExistingScheduleSerializer(serializers.Serializer[Any]):
    """The answer to a create whose key a schedule of the host already has, for a caller
    who may not view schedules: that it exists, and its id; nothing of what it holds."""

    outcome = serializers.ChoiceField(["existing"])
    id = serializers.UUIDField()
    host_id = serializers.UUIDField()
    key = serializers.CharField()


def existing_only(schedule: Schedule) -> dict[str, Any]:
    """``schedule`` as :class:`ExistingScheduleSerializer` shows it."""
    return {
        "outcome": "existing",
        "id": str(schedule.schedule_id),
        "host_id": str(schedule.host_id),
        "key": schedule.idempotency_key,
    }


class BulkCreateResultSerializer(serializers.Serializer[Any]):
    created = serializers.IntegerField(help_text=_("Schedules this call created."))
    existing = serializers.IntegerField(help_text=_("Items whose key a schedule already had."))
    results = BulkCreatedSerializer(many=True, help_text=_("One per item, in the items' order."))


class BulkCancelInput(StrictSerializer):
    """What to cancel: ids and idempotency keys of one host's schedules."""

    ids = serializers.ListField(
        child=UUIDText(), required=False, default=list, help_text=_("Schedule ids.")
    )
    keys = serializers.ListField(
        child=Text(max_length=KEY_MAX_LENGTH, trim_whitespace=False),
        required=False,
        default=list,
        help_text=_("Idempotency keys."),
    )
    host_id = UUIDText(
        required=False,
        help_text=_(
            "The host whose schedules the ids and keys name; one the request may reach "
            "(default: the first)."
        ),
    )


class BulkCancelledSerializer(serializers.Serializer[Any]):
    outcome = serializers.ChoiceField(
        ["cancelled", "skipped"],
        help_text=_("skipped: it was already cancelled or completed (see state)."),
    )
    id = serializers.UUIDField()
    name = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(ScheduleState.choices, help_text=_("Its state now."))


class BulkCancelResultSerializer(serializers.Serializer[Any]):
    cancelled = serializers.IntegerField(help_text=_("Schedules this call cancelled."))
    skipped = serializers.IntegerField(
        help_text=_("Schedules left alone: already cancelled or completed.")
    )
    results = BulkCancelledSerializer(
        many=True, help_text=_("One per id, then one per key, in the order sent.")
    )


# -- actions ---------------------------------------------------------------------------------


class PauseInput(StrictSerializer):
    reason = Text(
        required=False, allow_blank=True, default="", max_length=255, trim_whitespace=False
    )
    until = InputTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text=_("The pause ends by itself then (in the future)."),
    )


class ResumeInput(StrictSerializer):
    catch_up = Boolean(
        required=False,
        default=False,
        help_text=_(
            "False (default): go on from now. True: the slots missed while paused are "
            "handled by the misfire policy."
        ),
    )


class NoOptions(StrictSerializer):
    """No options (an empty object, or no body)."""


class RangeInput(StrictSerializer):
    start = InputTimeField()
    end = InputTimeField()


class DryRunQuery(StrictSerializer):
    start = InputTimeField()
    end = InputTimeField()
    limit = serializers.IntegerField(required=False, default=100, min_value=1, max_value=1000)


class PreviewQuery(StrictSerializer):
    count = serializers.IntegerField(required=False, default=10, min_value=1, max_value=1000)


class FiresSerializer(serializers.Serializer[Any]):
    fires = serializers.ListField(child=AwareDateTimeField())


class TriggerResultSerializer(serializers.Serializer[Any]):
    fired = serializers.IntegerField()
    schedule = ScheduleDetailSerializer()


class BackfillResultSerializer(serializers.Serializer[Any]):
    fired = serializers.IntegerField()
    already_fired = serializers.IntegerField()
    note = serializers.CharField(
        allow_null=True,
        help_text=_(
            "Why nothing fired when the range holds no slot of the schedule (it starts "
            "later, it ended before, ...); else null."
        ),
    )
    schedule = ScheduleDetailSerializer()


# -- history ---------------------------------------------------------------------------------


class EventSerializer(serializers.Serializer[Event]):
    id = serializers.UUIDField(read_only=True)
    type = serializers.CharField(source="event_type", read_only=True)
    version = serializers.IntegerField(source="aggregate_version", read_only=True)
    kind = serializers.SerializerMethodField(help_text=_("A fire, or a change (audit)."))
    slot = AwareDateTimeField(source="scheduled_ts", read_only=True, allow_null=True)
    at = AwareDateTimeField(source="event_ts", read_only=True)
    trigger = serializers.SerializerMethodField(
        help_text=_("What fired it: the schedule, run now (manual) or a backfill.")
    )
    actor = serializers.SerializerMethodField(
        help_text=_("Who made the change, or the scheduler instance that fired.")
    )
    leader_epoch = serializers.IntegerField(read_only=True, allow_null=True)
    payload = ObjectField(read_only=True)

    @extend_schema_field({"type": "string", "enum": ["fire", "change"]})
    def get_kind(self, event: Event) -> str:
        return "fire" if event.scheduled_ts is not None else "change"

    @extend_schema_field({"type": "string", "nullable": True})
    def get_trigger(self, event: Event) -> str | None:
        if event.scheduled_ts is None:
            return None
        return str((event.metadata or {}).get("trigger") or "schedule")

    @extend_schema_field({"type": "string", "nullable": True})
    def get_actor(self, event: Event) -> str | None:
        metadata = event.metadata or {}
        found = metadata.get("actor") or metadata.get("instance_id")
        return None if found is None else str(found)


class EventsQuery(StrictSerializer):
    kind = serializers.ChoiceField(["fire", "change"], required=False)


class MessageSerializer(serializers.Serializer[OutboxMessage]):
    id = serializers.UUIDField(read_only=True, help_text=_("= the event id; the idempotency key."))
    schedule_id = serializers.UUIDField(source="aggregate_id", read_only=True)
    version = serializers.IntegerField(source="aggregate_version", read_only=True)
    host_id = serializers.UUIDField(read_only=True)
    topic = serializers.CharField(read_only=True)
    event_type = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(DeliveryStatus.choices, read_only=True)
    priority = serializers.IntegerField(read_only=True)
    attempts = serializers.IntegerField(read_only=True)
    next_attempt = AwareDateTimeField(source="next_attempt_ts", read_only=True, allow_null=True)
    delivered = AwareDateTimeField(source="delivered_ts", read_only=True, allow_null=True)
    last_error = serializers.CharField(read_only=True)
    claimed_by = serializers.CharField(read_only=True)
    claimed_until = AwareDateTimeField(read_only=True, allow_null=True)
    at = AwareDateTimeField(source="event_ts", read_only=True)
    # The latest attempt's run (docs/delivery.md "Runs and their phases"; database times).
    picked = AwareDateTimeField(source="picked_ts", read_only=True, allow_null=True)
    started = AwareDateTimeField(source="started_ts", read_only=True, allow_null=True)
    completed = AwareDateTimeField(source="completed_ts", read_only=True, allow_null=True)
    failed = AwareDateTimeField(source="failed_ts", read_only=True, allow_null=True)
    run_status = serializers.SerializerMethodField(
        help_text=_("The latest attempt's run, derived from the status and the phases.")
    )
    queue_wait_seconds = serializers.SerializerMethodField(
        help_text=_("From the fire to the latest claim (null before one).")
    )
    run_seconds = serializers.SerializerMethodField(
        help_text=_("From the run's start to its end, completed or failed (null until both).")
    )

    @extend_schema_field(serializers.ChoiceField(RunStatus.choices))
    def get_run_status(self, message: OutboxMessage) -> str:
        return str(phases.run_status(message))

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_queue_wait_seconds(self, message: OutboxMessage) -> float | None:
        return seconds(phases.queue_wait(message.event_ts, message.picked_ts))

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_run_seconds(self, message: OutboxMessage) -> float | None:
        return seconds(phases.run_time(message.started_ts, message.completed_ts, message.failed_ts))


def seconds(span: timedelta | None) -> float | None:
    return None if span is None else span.total_seconds()


class MessageDetailSerializer(MessageSerializer):
    payload = ObjectField(
        source="delivered_payload",  # the event's, read by the shared id
        read_only=True,
        help_text=_("The CloudEvents envelope delivered."),
    )


class DeliveriesQuery(StrictSerializer):
    status = serializers.ChoiceField(DeliveryStatus.choices, required=False)


class OutboxQuery(DeliveriesQuery):
    topic = serializers.CharField(required=False, max_length=NAME_MAX_LENGTH, trim_whitespace=False)
    schedule = serializers.UUIDField(required=False, help_text=_("Only this schedule's."))


# -- the cluster -----------------------------------------------------------------------------


class LeaderSerializer(serializers.Serializer[Any]):
    instance_id = serializers.CharField()
    epoch = serializers.IntegerField()
    heartbeat_age_seconds = serializers.FloatField(source="heartbeat_seconds")
    acquired = AwareDateTimeField()
    live = serializers.BooleanField(help_text=_("Its lease has not expired."))
    released = serializers.BooleanField(help_text=_("It gave the lease up gracefully."))


class InstanceSerializer(serializers.Serializer[Any]):
    instance_id = serializers.CharField(source="row.instance_id")
    role = serializers.CharField(source="row.role")
    hostname = serializers.CharField(source="row.hostname")
    pid = serializers.IntegerField(source="row.pid")
    epoch = serializers.IntegerField(source="row.epoch", allow_null=True)
    started = AwareDateTimeField(source="row.started_ts")
    last_seen = AwareDateTimeField(source="row.last_seen_ts")
    seen_age_seconds = serializers.FloatField(source="seen_seconds")
    stale = serializers.BooleanField(help_text=_("It missed two reports."))


class BacklogSerializer(serializers.Serializer[Any]):
    due = serializers.IntegerField(help_text=_("Active schedules due now, all hosts."))
    oldest_due = AwareDateTimeField(allow_null=True)
    fires_last_minute = serializers.IntegerField(source="fires_minute")
    fires_last_hour = serializers.IntegerField(source="fires_hour")
    pending = serializers.IntegerField(help_text=_("Messages not delivered yet."))
    oldest_pending = AwareDateTimeField(source="oldest_pending.event_ts", allow_null=True)
    dead_letters = serializers.IntegerField()


class ClusterSerializer(serializers.Serializer[Any]):
    now = AwareDateTimeField(help_text=_("The database's clock."))
    lease_seconds = serializers.FloatField()
    leader = LeaderSerializer(allow_null=True)
    instances = InstanceSerializer(many=True)
    backlog = BacklogSerializer(source="*")


# -- errors (for the schema; errors.py builds them) ------------------------------------------


class ErrorSerializer(serializers.Serializer[Any]):
    status = serializers.IntegerField()
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(  # type: ignore[assignment]  # the field, not .errors
        child=serializers.ListField(child=serializers.CharField()),
        help_text=_("Messages by field (non_field_errors: about no one field)."),
    )


class PreconditionFailedSerializer(ErrorSerializer):
    current = ScheduleDetailSerializer(help_text=_("The schedule as it is now."))


def schedule_detail(schedule: Schedule, next_fires: list[datetime]) -> dict[str, Any]:
    schedule.next_fires = next_fires  # type: ignore[attr-defined]
    serializer: serializers.BaseSerializer[Schedule] = ScheduleDetailSerializer(schedule)
    return dict(serializer.data)
