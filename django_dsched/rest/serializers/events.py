"""A schedule's events (its history): its fires and its changes."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.models import Event
from django_dsched.rest.serializers.audience import SCHEDULER, Audience, ForAudience
from django_dsched.rest.serializers.fields import AwareDateTimeField, ObjectField


def named(event: Event) -> str | None:
    """The actor an event names (a user's name, code's), if any."""
    found = (event.metadata or {}).get("actor")
    return None if found is None else str(found)


class EventListSerializer(serializers.ListSerializer[Event]):
    """A page of events: who made its changes is read once for the page."""

    def to_representation(self, data: Any) -> list[Any]:
        events = list(data.all() if hasattr(data, "all") else data)
        audience = Audience.of(self.context)
        audience.learn(named(event) for event in events)
        audience.learn(
            str(event.payload["actor"])
            for event in events
            if isinstance(event.payload, dict) and event.payload.get("actor") is not None
        )
        return super().to_representation(events)


class EventSerializer(ForAudience[Event]):
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
        help_text=_(
            "Who made the change, or fired it. To a caller with the cluster's permission: "
            "the username, code's name, or the scheduler instance that fired. To anyone "
            "else: `scheduler`, `staff` (a staff user), `api` (another user) or `system` "
            "(the operator's code and commands)."
        )
    )
    leader_epoch = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text=_("The firing leader's epoch; null unless the caller may view the cluster."),
    )
    payload = ObjectField(
        read_only=True,
        help_text=_(
            "A fire's data, or what a change did (`actor`, and a set-aside's `error`, as "
            "`actor` and `last_error` are shown to this caller)."
        ),
    )

    hidden_fields = ("leader_epoch",)

    class Meta:
        list_serializer_class = EventListSerializer

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
        audience = Audience.of(self.context)
        name = named(event)
        if name is not None:
            return audience.actor(name)
        instance = (event.metadata or {}).get("instance_id")
        if instance is None:
            return None
        return str(instance) if audience.operations else SCHEDULER

    def to_representation(self, instance: Event) -> dict[str, Any]:
        data = super().to_representation(instance)
        audience = Audience.of(self.context)
        payload = data.get("payload")
        if audience.operations or instance.scheduled_ts is not None:
            return data  # a fire's payload is the schedule's own data
        if isinstance(payload, dict):
            payload = dict(payload)
            if payload.get("actor") is not None:
                payload["actor"] = audience.actor(str(payload["actor"]))
            if isinstance(payload.get("error"), str):
                payload["error"] = audience.error(payload["error"])
            data["payload"] = payload
        return data
