"""``event_data``'s field: JSON that is checked for depth and size before it is parsed or
serialised, so hostile input is a field error and never a ``RecursionError``.

Django's ``JSONField`` parses form text with ``json.loads`` and checks model values with
``json.dumps``; both recurse once per nesting level and fail with ``RecursionError`` (an
error page, a crashed command) on input some ten thousand levels deep.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models
from django.forms.fields import InvalidJSONInput

from django_dsched.models.validators import check_event_data_depth, check_event_data_text


class EventDataFormField(forms.JSONField):
    """A JSON form field that refuses too-large or too-deep text before parsing it."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not self.disabled and value not in self.empty_values:
            check_event_data_text(value)
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        # The form is shown again with what was typed, unparsed when it is refused.
        if isinstance(data, str) and not self.disabled:
            try:
                check_event_data_text(data)
            except forms.ValidationError:
                return InvalidJSONInput(data)
        return super().bound_data(data, initial)


class EventDataField(models.JSONField):
    """``JSONField`` that checks the nesting depth first (iteratively), then the rest."""

    def validate(self, value: Any, model_instance: models.Model | None) -> None:
        check_event_data_depth(value)
        super().validate(value, model_instance)

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": EventDataFormField, **kwargs})
