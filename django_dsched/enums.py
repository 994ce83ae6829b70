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


class ScheduleKind(models.TextChoices):
    INTERVAL = "INTERVAL", _("interval")
    CRON = "CRON", _("cron")
    ONCE = "ONCE", _("one-shot")


class MisfirePolicy(models.TextChoices):
    # Fire once, for the latest missed slot (the default).
    COALESCE = "COALESCE", _("fire once (coalesce)")
    # Fire every missed slot, oldest first, at most catch_up_limit of them.
    CATCH_UP = "CATCH_UP", _("fire every missed slot (catch up)")
    # Fire no missed slot; go on from the next future one.
    SKIP = "SKIP", _("skip missed slots")


class ScheduleOrigin(models.TextChoices):
    ADMIN = "ADMIN", _("admin")
    API = "API", _("Python API")
    # Made over the REST API (``django_dsched.rest``).
    REST = "REST", _("REST API")
    CODE = "CODE", _("declared in code")
    # Made by `dsched import-celery-beat` from a django-celery-beat PeriodicTask.
    CELERY_BEAT = "CELERY_BEAT", _("imported from django-celery-beat")


class ScheduleState(models.TextChoices):
    ACTIVE = "ACTIVE", _("active")
    PAUSED = "PAUSED", _("paused")
    CANCELLED = "CANCELLED", _("cancelled")
    # Fired its last slot: a one-shot, an end time or a fire limit reached.
    COMPLETED = "COMPLETED", _("completed")
    # The scheduler could not plan it (say, a time zone this host's tzdata lacks): it no
    # longer fires until an edit or a resume makes it plannable again. The error is kept in
    # ``set_aside_reason``.
    SET_ASIDE = "SET_ASIDE", _("set aside")


# The states a schedule can fire again from: it has not ended (completed and cancelled
# schedules never come back). Live schedules count against their host's quota, and a cancel
# ends them.
LIVE = (ScheduleState.ACTIVE.value, ScheduleState.PAUSED.value, ScheduleState.SET_ASIDE.value)
# The states whose next run stands: the scheduler fires the schedule then (a paused one once
# resumed). It is the next run shown, such a schedule can be run now, and an edit of its
# timing moves it. A set-aside schedule has none: the scheduler could not plan it.
PLANNED = (ScheduleState.ACTIVE.value, ScheduleState.PAUSED.value)


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", _("pending")
    DELIVERED = "DELIVERED", _("delivered")
    DELIVERY_FAILED = "DELIVERY_FAILED", _("delivery failed")


class RunStatus(models.TextChoices):
    """Where one delivery stands, derived from its phase timestamps (``outbox.phases``)."""

    # Waiting to be claimed (new, or its claim was given back or expired unstarted).
    PENDING = "PENDING", _("pending")
    # Claimed by a relay, not started yet.
    PICKED = "PICKED", _("picked")
    # Started (by the relay's handler, or reported started by a worker), not finished.
    RUNNING = "RUNNING", _("running")
    # The last attempt failed; a retry is due at next_attempt_ts.
    RETRYING = "RETRYING", _("retrying")
    # Handed to a transport that runs the work elsewhere (Django Tasks, Celery); the worker
    # has not reported yet.
    HANDED_OFF = "HANDED_OFF", _("handed off")
    SUCCEEDED = "SUCCEEDED", _("succeeded")
    # Handed off, and the worker reported that the run failed.
    FAILED = "FAILED", _("failed")
    # A dead letter (DELIVERY_FAILED): no more attempts.
    DEAD = "DEAD", _("dead letter")


def max_length_of(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)
