"""The API's field types, strict about JSON types and time zones, and
:class:`StrictSerializer`, which refuses the fields it does not know.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_dsched.changes.specs import not_a_choice
from django_dsched.exceptions import ValidationError as DschedValidationError
from django_dsched.models.validators import NAME_MAX_LENGTH, validate_aware

NAIVE = _("Give a timezone-aware time (with an offset or a zone).")  # validate_aware's


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an offset (a naive time is refused, as by the Python API); output in UTC."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            format="iso-8601", input_formats=["iso-8601"], default_timezone=UTC, **kwargs
        )

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            raise serializers.ValidationError(NAIVE)
        aware: datetime = super().enforce_timezone(value)  # in UTC (or "out of range")
        try:
            validate_aware(aware)  # the model's rule: within the supported times
        except DschedValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None
        return aware


# The years a time sent to the API may be written in. The supported times are from 1900-01-01
# to before 9000-01-01 UTC (models.validators.SUPPORTED_TIMES); with any offset (under 24
# hours), a time written in 1901 to 8998 is within them, and a pattern can say so: the
# schema and the server then agree on every time, whatever its offset.
FIRST_YEAR, LAST_YEAR = 1901, 8998
YEAR_PATTERN = (
    "^(190[1-9]|19[1-9][0-9]|[2-7][0-9]{3}|8[0-8][0-9]{2}|89[0-8][0-9]|899[0-8])-[0-9]{2}-[0-9]{2}T"
)
_YEAR = re.compile(YEAR_PATTERN)
OUT_OF_YEARS = _("Give a time written in the years %(first)d to %(last)d.")


@extend_schema_field({"type": "string", "format": "date-time", "pattern": YEAR_PATTERN})
class InputTimeField(AwareDateTimeField):
    """A time the client sends: as :class:`AwareDateTimeField`, written in the years
    :data:`FIRST_YEAR` to :data:`LAST_YEAR` (what the schema's pattern says)."""

    def to_internal_value(self, value: Any) -> datetime:
        if isinstance(value, str) and not _YEAR.match(value):
            if value[:4].isdigit() and _YEAR.match("2000" + value[4:]):
                raise serializers.ValidationError(
                    OUT_OF_YEARS % {"first": FIRST_YEAR, "last": LAST_YEAR}
                )
            self.fail("invalid", format="YYYY-MM-DDThh:mm[:ss[.uuuuuu]]+HH:MM")
        parsed: datetime = super().to_internal_value(value)
        return parsed


# JSON bodies are typed: DRF's fields would also take 5 for a name, "5" or 5.0 for a
# number, 0 for false and 7 for a UUID, which the schema (and a careful client) does not.


class JSONTyped(serializers.Field[Any, Any, Any, Any]):
    """Mixed in before a DRF field: it takes only a value of :attr:`json_type` (JSON's true
    and false are not numbers, though Python's bool is an int), then parses it as the field."""

    json_type: ClassVar[type]

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, self.json_type) or (
            isinstance(data, bool) and self.json_type is not bool
        ):
            self.fail("invalid")
        return super().to_internal_value(data)


class Choice(serializers.ChoiceField):
    """One of ``choices``; a value that is not says so listing them, in the Python API's
    words (:func:`.specs.not_a_choice`)."""

    def to_internal_value(self, data: Any) -> Any:
        if data == "" and self.allow_blank:
            return ""
        try:
            return self.choice_strings_to_values[str(data)]
        except KeyError:
            raise serializers.ValidationError(
                not_a_choice(data, self.choices.items()), code="invalid_choice"
            ) from None


class Text(JSONTyped, serializers.CharField):
    """A JSON string (DRF's CharField would also take a number)."""

    json_type = str


class Integer(JSONTyped, serializers.IntegerField):
    """A JSON integer (not a string, a float or a boolean)."""

    json_type = int


class Boolean(JSONTyped, serializers.BooleanField):
    """true or false (not 0, 1, "yes" or "on")."""

    json_type = bool


class UUIDText(JSONTyped, serializers.UUIDField):
    """A UUID in a JSON string (DRF's UUIDField would also take an integer)."""

    json_type = str


# The identifier rule of models.validators.identifier_validator, in a regex every client reads.
IDENTIFIER_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:/-]*$"


@extend_schema_field(
    {"type": "string", "pattern": IDENTIFIER_PATTERN, "maxLength": NAME_MAX_LENGTH}
)
class IdentifierField(Text):
    """A topic or event type; its rule is checked by the model (same message as the Python API)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=NAME_MAX_LENGTH, trim_whitespace=False, **kwargs)


@extend_schema_field(OpenApiTypes.OBJECT)
class ObjectField(serializers.JSONField):
    """A JSON object (event data, payloads); the model checks it is one, its size and depth."""


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields (and query parameters) it does not know: a typo would otherwise be
    silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key[:100]: [_("This field does not exist.")] for key in unknown[:20]}
                )
        return super().to_internal_value(data)
