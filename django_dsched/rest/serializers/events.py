"""A schedule's events (its history): its fires and its changes."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.models import Event
from django_dsched.rest.serializers.fields import AwareDateTimeField, ObjectField


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
