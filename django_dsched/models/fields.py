"""JSON fields that a value nested too deep cannot break.

Django's ``JSONField`` parses form text and stored values with ``json.loads`` and checks
model values with ``json.dumps``; both recurse once per nesting level and fail with
``RecursionError`` (an error page, a crashed command) on input some ten thousand levels deep.

* ``event_data``'s field (:class:`EventDataField`) checks depth and size before it parses or
  serialises, so hostile input is a field error at every door.
* Reading (:class:`ReadableJSONField`, which both it and the events' payload and metadata
  are): a stored value Python cannot parse (written by hand past every door) reads as a
  text saying so, :data:`UNREADABLE`, so a list that holds it still answers, and a form
  showing it cannot save it back as data (``event_data`` must be a JSON object).
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


# What a stored JSON value Python cannot parse reads as.
UNREADABLE = "(unreadable: nested deeper than Python can parse; written past every door)"


class ReadableJSONField(models.JSONField):
    """``JSONField`` whose stored values are read without a ``RecursionError``."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except RecursionError:
            return UNREADABLE


class EventDataField(ReadableJSONField):
    """``JSONField`` that checks the nesting depth first (iteratively), then the rest."""

    def validate(self, value: Any, model_instance: models.Model | None) -> None:
        check_event_data_depth(value)
        super().validate(value, model_instance)

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": EventDataFormField, **kwargs})
