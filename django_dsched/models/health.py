"""What a schedule's health is judged by: its own thresholds, and its runs' outcomes.

- :class:`HealthOptions`: the fields a schedule carries (``Schedule`` inherits them): the
  grace before it is LATE, the failures in a row it tolerates, the longest a run may take,
  and whether it is ``monitored`` (series of its own in the metrics). Empty thresholds take
  the settings' defaults, read when the health is judged.
- :class:`ScheduleHealth` (``schedule_health_t``): the outcomes of a schedule's runs in a
  row, written by the statements that record them (the relay's settle, the workers'
  reports: :mod:`django_dsched.outbox.run_health`) for a schedule whose run failed, that is
  failing, or that is monitored; a schedule that never failed and is not monitored has no
  row, and its successes write nothing.

The judgment itself (OK, LATE, FAILING, ...) is made at read time against the database's
clock: :mod:`django_dsched.health`.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

# Thresholds fit an int4 and a PostgreSQL interval of seconds.
MAX_SECONDS = 10 * 365 * 86_400


class HealthOptions(models.Model):
    """A schedule's health thresholds (fields of ``Schedule``, declared here)."""

    health_grace_seconds = models.IntegerField(
        _("late after (s)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_SECONDS)],
        help_text=_(
            "Health: a slot still unfired this many seconds after its run time makes the "
            "schedule LATE. Empty: DSCHED_HEALTH_GRACE_SECONDS."
        ),
    )
    failure_tolerance = models.IntegerField(
        _("failures tolerated"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(1_000_000)],
        help_text=_(
            "Health: failed runs in a row before the schedule is FAILING (0: the first). "
            "Empty: DSCHED_HEALTH_FAILURE_TOLERANCE."
        ),
    )
    max_runtime_seconds = models.IntegerField(
        _("longest run (s)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SECONDS)],
        help_text=_(
            "Health: a run going on longer than this makes the schedule STUCK. "
            "Empty: DSCHED_HEALTH_MAX_RUNTIME_SECONDS."
        ),
    )
    monitored = models.BooleanField(
        _("monitored"),
        default=False,
        db_default=False,
        help_text=_(
            "Give it series of its own in the metrics (last success, next due, health), for "
            "alerts on this schedule alone (at most DSCHED_HEALTH_MONITORED_MAX schedules)."
        ),
    )

    class Meta:
        abstract = True


# The CHECK that keeps the thresholds in range (one of Schedule's constraints).
HEALTH_BOUNDS = models.CheckConstraint(
    condition=models.Q(health_grace_seconds__gte=0, health_grace_seconds__lte=MAX_SECONDS)
    & models.Q(failure_tolerance__gte=0, failure_tolerance__lte=1_000_000)
    & models.Q(max_runtime_seconds__gte=1, max_runtime_seconds__lte=MAX_SECONDS),
    name="dsched_schedule_health_bounds",
)

# The schedules marked monitored, for the relay's settle and the metrics: rows written by
# fires only while they are monitored (few by design), never read whole.
MONITORED_INDEX = models.Index(
    fields=["schedule_id"],
    condition=models.Q(monitored=True),
    name="dsched_schedule_monitored_idx",
)


class ScheduleHealth(models.Model):
    """The outcomes of one schedule's runs in a row (``schedule_health_t``).

    Written only by the statements that record outcomes; no constraint but the key, so a
    write here can never refuse the settle it rides in. ``failures`` counts failed runs
    (a failed attempt, a dead letter, a worker's reported failure) since the last success
    (a run the relay completed, a worker's reported completion; a hand-off to a worker
    ends a streak of failed hand-offs, not a worker's failures)."""

    schedule_id = models.UUIDField(_("schedule id"), primary_key=True)
    failures = models.IntegerField(_("failures in a row"), default=0, db_default=0)
    failing_since_ts = models.DateTimeField(
        _("failing since"), null=True, blank=True, help_text=_("The first failure of the row.")
    )
    last_failure_ts = models.DateTimeField(_("last failure"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="", db_default="")
    last_success_ts = models.DateTimeField(_("last success"), null=True, blank=True)
    handed_off_ts = models.DateTimeField(
        _("last hand-off"),
        null=True,
        blank=True,
        help_text=_("The last delivery to a transport whose workers run the work."),
    )
    worker_failure = models.BooleanField(
        _("failed in a worker"),
        default=False,
        db_default=False,
        help_text=_("The last failure of the row was reported by a worker."),
    )

    class Meta:
        db_table = "schedule_health_t"
        verbose_name = _("schedule health")
        verbose_name_plural = _("schedule health")
        indexes = [
            # The failing schedules (few): counted by the metrics, read by the settle.
            models.Index(
                fields=["schedule_id"],
                condition=models.Q(failures__gt=0),
                name="dsched_health_failing_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id}: {self.failures} failure(s) in a row"
