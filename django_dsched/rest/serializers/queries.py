"""What the reads take in their query strings (a parameter they do not know is refused)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from django_dsched.enums import DeliveryStatus, ScheduleKind, ScheduleState
from django_dsched.models.validators import KEY_MAX_LENGTH, NAME_MAX_LENGTH
from django_dsched.rest.serializers.fields import (
    Choice,
    InputTimeField,
    StrictSerializer,
    Text,
    UUIDText,
)


class ScheduleListQuery(StrictSerializer):
    state = Choice(ScheduleState.choices, required=False)
    kind = Choice(ScheduleKind.choices, required=False)
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


class DryRunQuery(StrictSerializer):
    start = InputTimeField()
    end = InputTimeField()
    limit = serializers.IntegerField(required=False, default=100, min_value=1, max_value=1000)


class PreviewQuery(StrictSerializer):
    count = serializers.IntegerField(required=False, default=10, min_value=1, max_value=1000)


class EventsQuery(StrictSerializer):
    kind = Choice(["fire", "change"], required=False)


class DeliveriesQuery(StrictSerializer):
    status = Choice(DeliveryStatus.choices, required=False)


class OutboxQuery(DeliveriesQuery):
    topic = serializers.CharField(required=False, max_length=NAME_MAX_LENGTH, trim_whitespace=False)
    schedule = serializers.UUIDField(required=False, help_text=_("Only this schedule's."))
