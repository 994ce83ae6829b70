"""What a schedule's actions read and answer: pause, resume, run now, backfill, preview and
dry run; :class:`NoOptions` for an action without options (the outbox's too).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from django_dsched.rest.serializers.calendars import SlotSerializer
from django_dsched.rest.serializers.fields import (
    AwareDateTimeField,
    Boolean,
    InputTimeField,
    StrictSerializer,
    Text,
)
from django_dsched.rest.serializers.schedule_output import ScheduleDetailSerializer


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


class FiresSerializer(serializers.Serializer[Any]):
    fires = serializers.ListField(child=AwareDateTimeField())


class PreviewSerializer(FiresSerializer):
    slots = SlotSerializer(
        many=True,
        help_text=_(
            "The fires with their fates (shifted by a calendar, or not), and the slots its "
            "calendars drop among them (excluded), with why."
        ),
    )


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
