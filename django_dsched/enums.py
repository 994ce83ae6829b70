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
    # RFC 5545 recurrence rule (RRULE, with DTSTART, RDATE and EXDATE lines).
    RRULE = "RRULE", _("recurrence rule")


class CalendarPolicy(models.TextChoices):
    """What a schedule's calendars do to a slot on a day that is not a business day (the
    names of RFC 7529's SKIP; ``timetables.filtered.Shift``). A slot in a blackout window
    is dropped whatever the policy."""

    OMIT = "OMIT", _("drop the slot (omit)")
    BACKWARD = "BACKWARD", _("move it to the previous business day")
    FORWARD = "FORWARD", _("move it to the next business day")


class WindowKind(models.TextChoices):
    """A calendar's blackout window: once (two instants), or every week on a zone's wall
    clock."""

    ONE_OFF = "ONE_OFF", _("once")
    WEEKLY = "WEEKLY", _("every week")


class MisfirePolicy(models.TextChoices):
    # Fire once, for the latest missed slot (the default).
    COALESCE = "COALESCE", _("fire once (coalesce)")
    # Fire every missed slot, oldest first, at most catch_up_limit of them.
    CATCH_UP = "CATCH_UP", _("fire every missed slot (catch up)")
    # Fire no missed slot; go on from the next future one.
    SKIP = "SKIP", _("skip missed slots")


class OverlapPolicy(models.TextChoices):
    """What a due slot does while the schedule's previous run is still going (docs/overlap.md)."""

    # Fire whatever runs (the default: no check, the fire path costs what it always did).
    ALLOW_ALL = "ALLOW_ALL", _("allow all: fire whatever runs")
    # Do not fire the slot; go on from the next one.
    SKIP = "SKIP", _("skip the slot")
    # Hold the first slot and fire it when the run ends; later slots meanwhile are skipped.
    BUFFER_ONE = "BUFFER_ONE", _("buffer one slot")
    # Hold every slot (at most DSCHED_OVERLAP_BUFFER_LIMIT) and fire them in turn.
    BUFFER_ALL = "BUFFER_ALL", _("buffer every slot")
    # Cancel the previous run if it has not started, and fire; else the newest slot waits.
    CANCEL_OTHER = "CANCEL_OTHER", _("cancel the previous run if not started")


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


class Health(models.TextChoices):
    """How a schedule is doing, judged from what the database records against its clock
    (:mod:`django_dsched.health`, docs/observability.md "Schedule health")."""

    # Fires on time, and its runs did not fail past its tolerance.
    OK = "OK", _("OK")
    # Active, has not fired yet, and its first slot has not passed its grace.
    NEW = "NEW", _("new")
    # A slot passed its grace without a fire (or its pause ended that long ago).
    LATE = "LATE", _("late")
    # A run started and has not finished within its maximum run time.
    STUCK = "STUCK", _("stuck")
    # Its latest runs failed (or were dead-lettered), more of them in a row than it tolerates.
    FAILING = "FAILING", _("failing")
    PAUSED = "PAUSED", _("paused")
    SET_ASIDE = "SET_ASIDE", _("set aside")
    # Completed or cancelled: it will not fire again.
    ENDED = "ENDED", _("ended")


# The health states that want a person's attention (``dsched list --unhealthy``, alerts).
UNHEALTHY = (Health.LATE.value, Health.STUCK.value, Health.FAILING.value, Health.SET_ASIDE.value)


def max_length_of(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)
