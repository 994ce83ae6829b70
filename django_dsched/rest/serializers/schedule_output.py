"""A schedule as the API answers it: in a list, alone (with its next fires), as the
schedule a create's key already names, and where it stands (``status/``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.changes.creates import LATE_FIRES_NOW, LATE_SKIPPED, Late
from django_dsched.changes.describe import describe, zone_of
from django_dsched.enums import (
    PLANNED,
    DeliveryStatus,
    FrequencyUnit,
    MisfirePolicy,
    RunStatus,
    ScheduleKind,
    ScheduleOrigin,
    ScheduleState,
)
from django_dsched.models import Schedule
from django_dsched.rest.serializers.audience import ForAudience
from django_dsched.rest.serializers.fields import AwareDateTimeField, ObjectField
from django_dsched.rest.serializers.schedule_input import BLANK_AS_NULL

# The times ``local`` gives, each an ISO 8601 time on the schedule zone's wall clock.
LOCAL_TIMES = ("start", "at", "end", "next_run", "last_fired", "paused_until")
LOCAL_SCHEMA = {
    "type": "object",
    "properties": {
        name: {"type": "string", "format": "date-time", "nullable": True} for name in LOCAL_TIMES
    },
    "required": list(LOCAL_TIMES),
    "additionalProperties": False,
}


LATE_SCHEMA = {
    "type": "object",
    "nullable": True,
    "properties": {
        "by_seconds": {"type": "number"},
        "outcome": {"type": "string", "enum": [LATE_FIRES_NOW, LATE_SKIPPED]},
    },
    "required": ["by_seconds", "outcome"],
    "additionalProperties": False,
}


def late_answer(schedule: Schedule) -> dict[str, Any] | None:
    """A created one-shot's lateness (:func:`.creates.lateness`) as answers give it."""
    late: Late | None = getattr(schedule, "late", None)
    if late is None:
        return None
    return {"by_seconds": round(late.by.total_seconds(), 3), "outcome": late.outcome}


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
    local = serializers.SerializerMethodField(
        help_text=_(
            "The schedule's times on the wall clock of its time_zone (ISO 8601 with that "
            "zone's offset then): the same instants as the UTC fields of the same names."
        )
    )
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
        if schedule.state not in PLANNED:
            return None
        value: str | None = AwareDateTimeField().to_representation(schedule.next_run_ts)
        return value

    def get_description(self, schedule: Schedule) -> str:
        return describe(schedule)

    @extend_schema_field(LOCAL_SCHEMA)
    def get_local(self, schedule: Schedule) -> dict[str, str | None]:
        zone = zone_of(schedule)
        once = schedule.schedule_kind == ScheduleKind.ONCE
        times = {
            "start": None if once else schedule.start_ts,
            "at": schedule.start_ts if once else None,
            "end": schedule.end_ts,
            "next_run": schedule.next_run_ts if schedule.state in PLANNED else None,
            "last_fired": schedule.last_fired_ts,
            "paused_until": schedule.paused_until,
        }
        return {
            name: None if t is None else t.astimezone(zone).isoformat() for name, t in times.items()
        }

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
    late = serializers.SerializerMethodField(
        help_text=_(
            "Only in the answer to the create of a one-shot whose time had passed (else "
            "null): by how many seconds, and what the scheduler does with it: FIRES_NOW "
            "(late), or SKIPPED (later than its misfire grace: it completes without firing; "
            "misfire_policy SKIP drops late one-shots)."
        )
    )
    next_fires_local = serializers.SerializerMethodField(
        help_text=_("next_fires on the wall clock of the schedule's time_zone.")
    )

    @extend_schema_field(LATE_SCHEMA)
    def get_late(self, schedule: Schedule) -> dict[str, Any] | None:
        return late_answer(schedule)

    @extend_schema_field({"type": "array", "items": {"type": "string", "format": "date-time"}})
    def get_next_fires_local(self, schedule: Schedule) -> list[str]:
        zone = zone_of(schedule)
        return [t.astimezone(zone).isoformat() for t in getattr(schedule, "next_fires", [])]


def schedule_detail(schedule: Schedule, next_fires: list[datetime]) -> dict[str, Any]:
    schedule.next_fires = next_fires  # type: ignore[attr-defined]
    serializer: serializers.BaseSerializer[Schedule] = ScheduleDetailSerializer(schedule)
    return dict(serializer.data)


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


# A delayed message's status: its newest fire's delivery, or the state of a schedule that
# will never fire and has no message (api.Status.message_status).
MESSAGE_STATUSES = [
    *DeliveryStatus.values,
    ScheduleState.CANCELLED.value,
    ScheduleState.COMPLETED.value,
]


class ScheduleStatusSerializer(ForAudience[Any]):
    """Where a schedule stands, read with its newest message (as api.status gives it)."""

    error_fields = ("last_error", "set_aside_reason")

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
    last_error = serializers.CharField(
        allow_blank=True,
        help_text=_(
            "The newest message's latest error. Whole to a caller with the cluster's "
            "permission; to anyone else its class and a general sentence."
        ),
    )
    fire_count = serializers.IntegerField()
    misfire_count = serializers.IntegerField()
    paused_reason = serializers.CharField(allow_blank=True)
    paused_until = AwareDateTimeField(allow_null=True)
    set_aside_reason = serializers.CharField(
        allow_blank=True,
        help_text=_(
            "Why the scheduler set it aside (empty unless it did): as last_error, whole to a "
            "caller with the cluster's permission, else its class and a general sentence."
        ),
    )
    version = serializers.IntegerField(help_text=_("+1 per fire and per change."))
