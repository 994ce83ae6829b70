from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class FrequencyUnit(models.TextChoices):
    SECONDS = "SECONDS", _("seconds")
    MINUTES = "MINUTES", _("minutes")
    HOURS = "HOURS", _("hours")
    DAYS = "DAYS", _("days")
    WEEKS = "WEEKS", _("weeks")
    MONTHS = "MONTHS", _("months")
    YEARS = "YEARS", _("years")


class ScheduleState(models.TextChoices):
    ACTIVE = "ACTIVE", _("active")
    PAUSED = "PAUSED", _("paused")
    CANCELLED = "CANCELLED", _("cancelled")
    # No further slot exists (the grid ran past the calendar's end).
    COMPLETED = "COMPLETED", _("completed")


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", _("pending")
    DELIVERED = "DELIVERED", _("delivered")
    DELIVERY_FAILED = "DELIVERY_FAILED", _("delivery failed")


def max_length_of(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)
