"""The one error shape, for the schema (rest/errors.py builds the answers)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from django_dsched.rest.serializers.schedule_output import ScheduleDetailSerializer


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
