"""Outbox messages: what the relay delivers, with the phases of its latest attempt."""

from __future__ import annotations

from datetime import timedelta

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.enums import DeliveryStatus, RunStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox import phases
from django_dsched.rest.serializers.audience import ForAudience
from django_dsched.rest.serializers.fields import AwareDateTimeField, ObjectField


class MessageSerializer(ForAudience[OutboxMessage]):
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
    last_error = serializers.CharField(
        read_only=True,
        help_text=_(
            "The latest failed attempt's error. Whole to a caller with the cluster's "
            "permission; to anyone else its class and a general sentence (the text may name "
            "the operator's machines, addresses or code)."
        ),
    )
    claimed_by = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text=_(
            "The relay holding its claim (empty when none); null unless the caller may view "
            "the cluster."
        ),
    )
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

    hidden_fields = ("claimed_by",)
    error_fields = ("last_error",)

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
