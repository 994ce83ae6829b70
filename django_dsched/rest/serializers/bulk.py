"""What the bulk endpoints read and answer (``schedules/bulk/``, ``schedules/bulk-cancel/``)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.models.validators import KEY_MAX_LENGTH
from django_dsched.rest.serializers.fields import (
    AwareDateTimeField,
    StrictSerializer,
    Text,
    UUIDText,
)
from django_dsched.rest.serializers.schedule_output import LATE_SCHEMA

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
    late = serializers.SerializerMethodField(
        help_text=_("As a single create's `late`: a one-shot created after its time, else null.")
    )

    @extend_schema_field(LATE_SCHEMA)
    def get_late(self, item: Any) -> Any:
        return item.get("late")


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
