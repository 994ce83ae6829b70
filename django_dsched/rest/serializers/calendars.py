"""A business calendar as the API reads and answers it (``calendars/``), with its blackout
windows; and the slots of a schedule's preview with their fates."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.conf import app_settings
from django_dsched.enums import WindowKind
from django_dsched.models import Calendar, CalendarWindow
from django_dsched.models.calendar import MAX_DATES, MAX_WINDOWS
from django_dsched.models.validators import NAME_MAX_LENGTH
from django_dsched.rest.serializers.fields import (
    AwareDateTimeField,
    InputTimeField,
    Integer,
    StrictSerializer,
    Text,
    UUIDText,
)

WEEKDAY = _("0 is Monday, 6 Sunday.")


class Day(Integer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_value=0, max_value=6, help_text=WEEKDAY, **kwargs)


class WindowSerializer(StrictSerializer):
    """A blackout window: ONE_OFF from ``start`` to ``end``; WEEKLY from ``start_day`` at
    ``start_time`` to ``end_day`` at ``end_time`` on the wall clock of ``time_zone``."""

    kind = serializers.ChoiceField(WindowKind.choices)
    label = Text(  # type: ignore[assignment]  # a field named label (not Field.label)
        required=False, allow_blank=True, max_length=200, trim_whitespace=False
    )
    start = InputTimeField(source="start_ts", required=False, allow_null=True)
    end = InputTimeField(source="end_ts", required=False, allow_null=True)
    start_day = Day(required=False, allow_null=True)
    start_time = serializers.TimeField(required=False, allow_null=True)
    end_day = Day(required=False, allow_null=True)
    end_time = serializers.TimeField(required=False, allow_null=True)
    time_zone = Text(required=False, max_length=64, trim_whitespace=False)


class CalendarInputSerializer(StrictSerializer):
    """A calendar's definition (create, replace with PUT, change with PATCH)."""

    name = Text(max_length=NAME_MAX_LENGTH, trim_whitespace=False)
    host_id = UUIDText(
        required=False,
        help_text=_("The tenant; one of the hosts the request may reach (default: the first)."),
    )
    country = Text(
        required=False,
        allow_blank=True,
        max_length=8,
        help_text=_("ISO 3166 country code whose public holidays are days off (BE, US, ...)."),
    )
    subdivision = Text(required=False, allow_blank=True, max_length=16)
    first_year = Integer(required=False, allow_null=True, min_value=1900, max_value=9000)
    last_year = Integer(
        required=False,
        allow_null=True,
        min_value=1900,
        max_value=9000,
        help_text=_("The country's holidays are kept from first_year to last_year (at most 50)."),
    )
    added_dates = serializers.ListField(
        child=serializers.DateField(), required=False, max_length=MAX_DATES
    )
    removed_dates = serializers.ListField(
        child=serializers.DateField(), required=False, max_length=MAX_DATES
    )
    weekend_days = serializers.ListField(child=Day(), required=False, max_length=6)
    windows = serializers.ListField(
        child=WindowSerializer(), required=False, max_length=MAX_WINDOWS
    )


class HolidaySerializer(serializers.Serializer[Any]):
    date = serializers.DateField()
    name = serializers.CharField()


class CalendarSerializer(serializers.Serializer[Calendar]):
    id = serializers.UUIDField(source="calendar_id", read_only=True)
    host_id = serializers.UUIDField(read_only=True)
    shared = serializers.SerializerMethodField(
        help_text=_("The operator's: every tenant's schedules may use it (read-only to them).")
    )
    name = serializers.CharField(read_only=True)
    country = serializers.CharField(read_only=True)
    subdivision = serializers.CharField(read_only=True)
    first_year = serializers.IntegerField(read_only=True, allow_null=True)
    last_year = serializers.IntegerField(read_only=True, allow_null=True)
    holidays = serializers.SerializerMethodField(
        help_text=_("The country's public holidays in the years kept, as saved.")
    )
    added_dates = serializers.ListField(child=serializers.DateField(), read_only=True)
    removed_dates = serializers.ListField(child=serializers.DateField(), read_only=True)
    weekend_days = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    windows = serializers.SerializerMethodField()
    version = serializers.IntegerField(
        read_only=True, help_text=_("+1 per change; the next plan of each schedule reads it.")
    )
    created = AwareDateTimeField(source="created_ts", read_only=True)
    updated = AwareDateTimeField(source="updated_ts", read_only=True)

    def get_shared(self, calendar: Calendar) -> bool:
        return bool(calendar.host_id == app_settings.DEFAULT_HOST_ID)

    @extend_schema_field(HolidaySerializer(many=True))
    def get_holidays(self, calendar: Calendar) -> list[dict[str, Any]]:
        days = [{"date": day, "name": name} for day, name in calendar.holidays or ()]
        return list(HolidaySerializer(days, many=True).data)

    @extend_schema_field(WindowSerializer(many=True))
    def get_windows(self, calendar: Calendar) -> list[dict[str, Any]]:
        windows: list[CalendarWindow] = list(calendar.windows.all())
        return [dict(WindowSerializer(window).data) for window in windows]


class SlotSerializer(serializers.Serializer[Any]):
    """A slot of a schedule's preview and its fate."""

    slot = AwareDateTimeField(help_text=_("The slot as the timing plans it, before calendars."))
    runs_at = AwareDateTimeField(
        allow_null=True, help_text=_("When it fires (with jitter; moved); null: dropped.")
    )
    fate = serializers.ChoiceField(["fires", "shifted", "excluded"])
    reason = serializers.CharField(
        allow_blank=True, help_text=_("Why it was moved or dropped, by which calendar.")
    )
