"""The forms on the confirmation pages of the schedule actions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_dsched.models.validators import validate_plain_text


class NoOptions(forms.Form):
    """Actions that need nothing but a confirmation."""


class PauseOptions(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        max_length=255,
        required=False,
        validators=[validate_plain_text],
        help_text=_("Shown on the schedule's page and kept in its history."),
    )
    until = forms.DateTimeField(
        label=_("Paused until"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["until"].help_text = _(
            "Optional: the schedules resume by themselves then (time zone %(zone)s). Empty: "
            "they stay paused until someone resumes them."
        ) % {"zone": timezone.get_current_timezone_name()}
