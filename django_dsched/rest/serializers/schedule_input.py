"""A schedule's definition as the API reads it (create, replace with PUT, change with PATCH).

Input serializers check types and shapes only; the rules are the model's and the
services' (the Python API's own checks and messages), mapped onto these field names by
:data:`API_NAMES`. Unknown fields are refused, so a typo is a 400, not a silent default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from django_dsched.changes.creates import MAX_DELAY
from django_dsched.changes.specs import OPTIONS
from django_dsched.enums import FrequencyUnit, MisfirePolicy, ScheduleKind
from django_dsched.models import Schedule
from django_dsched.models.validators import KEY_MAX_LENGTH, NAME_MAX_LENGTH
from django_dsched.rest.serializers.fields import (
    Choice,
    IdentifierField,
    InputTimeField,
    Integer,
    ObjectField,
    StrictSerializer,
    Text,
    UUIDText,
)
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


class ScheduleInputSerializer(StrictSerializer):
    """A schedule's definition (create, replace with PUT, change with PATCH)."""

    name = Text(
        required=False,
        max_length=NAME_MAX_LENGTH,
        trim_whitespace=False,
        help_text=_(
            "Unique per host. Default: the key when there is one, else the schedule's id (as "
            "in the Python API). A PUT without it keeps the name."
        ),
    )
    kind = Choice(ScheduleKind.choices)
    every = Integer(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=INT32,
        help_text=_("Interval schedules: how many units lie between two fires."),
    )
    unit = Choice(
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
    misfire_policy = Choice(MisfirePolicy.choices, required=False)
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
        # The model's message (the Python API's), on the field.
        error_messages={"blank": _("An idempotency key must not be empty.")},
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
    """The model's default of each writable field but ``name``, ``start`` and ``key``
    (what a PUT resets: a schedule keeps its name, its start, and the idempotency key it
    was created with)."""
    fields = {f.name: f for f in Schedule._meta.get_fields() if hasattr(f, "get_default")}
    return {
        model: fields[model].get_default()
        for api, model in MODEL_FIELDS.items()
        if api not in ("name", "start", "key")
    }
