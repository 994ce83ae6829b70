"""A schedule's overlap and failure policies (docs/overlap.md): its columns, their CHECK, and
when a run counts as still going.

What a due slot does while the schedule's previous run is still going is its
``overlap_policy`` (:class:`~django_dsched.enums.OverlapPolicy`); ``pause_on_failure`` pauses
it when one of its runs becomes a dead letter. ``held_by`` is the run a held slot waits for;
``skip_count`` and ``buffer_count`` count what the policies did.

A run is a fire's outbox message, and the *previous run* is the schedule's newest one (by
version). It is **going** (:func:`going`) while:

- it is ``PENDING`` and not held by an expired claim: waiting to be claimed, waiting for a
  retry, or claimed by a relay whose claim is live (the relay's heartbeat renews it while the
  handler runs). A relay that died mid-run stops renewing: once its claim expires (the
  visibility timeout) the run no longer counts, and the schedule fires again;
- it was handed to workers (``DELIVERED``, Celery, Django Tasks) and no end was reported,
  within ``DSCHED_OVERLAP_WORKER_TIMEOUT`` of the hand-off or of its worker's start report:
  a worker that died never blocks the schedule for longer.

Completed, failed (a worker's report) and dead-lettered runs are over.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_dsched.enums import DeliveryStatus, OverlapPolicy, ScheduleKind, max_length_of
from django_dsched.exceptions import ValidationError
from django_dsched.models.conditions import OneOf, differs

ALLOW_ALL = OverlapPolicy.ALLOW_ALL.value

# The fields a caller sets (every door); the others are the scheduler's.
POLICY_FIELDS = ("overlap_policy", "pause_on_failure")


class OverlapFields(models.Model):
    """The overlap and failure columns of ``schedule_t`` (an abstract base of ``Schedule``)."""

    overlap_policy = models.CharField(
        _("overlap policy"),
        max_length=max_length_of(OverlapPolicy),
        choices=OverlapPolicy.choices,
        default=OverlapPolicy.ALLOW_ALL,
        db_default=OverlapPolicy.ALLOW_ALL,
        help_text=_(
            "What a slot does while the previous run is still going: fire anyway (allow "
            "all), skip it, buffer one or every slot until the run ends, or cancel a "
            "previous run that has not started."
        ),
    )
    pause_on_failure = models.BooleanField(
        _("pause on failure"),
        default=False,
        db_default=False,
        help_text=_(
            "Pause the schedule when one of its runs fails for good (a dead letter, after "
            "all its attempts)."
        ),
    )
    held_by = models.UUIDField(
        _("held for run"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("The run (outbox message) the next slot waits for, under a buffer policy."),
    )
    skip_count = models.BigIntegerField(
        _("overlap skips"),
        default=0,
        db_default=0,
        editable=False,
        help_text=_("Times slots were not fired because the previous run was still going."),
    )
    buffer_count = models.BigIntegerField(
        _("buffered"),
        default=0,
        db_default=0,
        editable=False,
        help_text=_("Slots held until the previous run ended."),
    )

    class Meta:
        abstract = True

    def clean(self) -> None:
        super().clean()
        once = getattr(self, "schedule_kind", None) == ScheduleKind.ONCE
        if once and self.overlap_policy != ALLOW_ALL:
            raise ValidationError(
                {"overlap_policy": _("A one-shot fires once: it has no overlap policy.")},
                code="once_overlap",
            )


# One CHECK for the block (PostgreSQL compiles every CHECK of a table on each write): a known
# policy, none but ALLOW_ALL on a one-shot (it fires once), and a held slot only under a
# policy that holds.
OVERLAP_CONSTRAINTS = [
    models.CheckConstraint(
        condition=OneOf("overlap_policy", OverlapPolicy.values)
        & (models.Q(overlap_policy=ALLOW_ALL) | differs("schedule_kind", ScheduleKind.ONCE))
        & (differs("overlap_policy", ALLOW_ALL) | models.Q(held_by__isnull=True)),
        name="dsched_schedule_overlap_valid",
        violation_error_message=_(
            "The overlap policy must be one of the policies, and a one-shot allows all."
        ),
    ),
]


def going(message: str, worker_timeout: str = "%(worker_timeout)s") -> str:
    """SQL: whether the outbox row ``message`` is a run still going (see the module), by the
    statement's clock; ``worker_timeout``: seconds (a parameter)."""
    return f"""(CASE {message}.status
        WHEN '{DeliveryStatus.PENDING.value}'
        THEN {message}.claimed_until IS NULL OR {message}.claimed_until > statement_timestamp()
        WHEN '{DeliveryStatus.DELIVERED.value}'
        THEN {message}.completed_ts IS NULL AND {message}.failed_ts IS NULL
             AND GREATEST({message}.delivered_ts, {message}.started_ts)
                 > statement_timestamp() - make_interval(secs => {worker_timeout})
        ELSE false END)"""


# A previous run, as the fire path sees it: over, going, or going and never attempted (a
# message no relay ever claimed: CANCEL_OTHER may cancel it).
FREE, GOING, QUEUED = "free", "going", "queued"


def run_state(message: str, worker_timeout: str = "%(worker_timeout)s") -> str:
    """SQL: :data:`FREE`, :data:`GOING` or :data:`QUEUED` for the outbox row ``message``."""
    return f"""(CASE WHEN NOT {going(message, worker_timeout)} THEN '{FREE}'
                 WHEN {message}.status = '{DeliveryStatus.PENDING.value}'
                      AND {message}.attempts = 0 THEN '{QUEUED}'
                 ELSE '{GOING}' END)"""


# The fire path's probes of the outbox (firing/claim.py), as functions: a statement naming
# outbox_message_t is planned over every day partition kept (45 days of history by default,
# and a week ahead), and the claim named it ten times, in each of its parts, for rows that
# rarely need it (ALLOW_ALL, nothing held). A function's query is planned when it is called,
# for the row that needs it (PL/pgSQL keeps the plan for the session when it can), so the
# claim itself plans no day of the outbox. Both read with the calling statement's
# snapshot and clock (STABLE; statement_timestamp() is the caller's).
#: Whether the run ``run`` (a message id) is going; NULL if there is no such message.
RUN_GOING = "dsched_run_going"
#: The schedule's previous run: ARRAY[its id, :func:`run_state`]; NULL if it has none.
PREVIOUS_RUN_OF = "dsched_previous_run"
PROBES = f"""
CREATE FUNCTION {RUN_GOING}(run uuid, worker_timeout float8) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT {going("o", "worker_timeout")} FROM outbox_message_t o WHERE o.id = run);
END
$$;
CREATE FUNCTION {PREVIOUS_RUN_OF}(schedule uuid, worker_timeout float8) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT ARRAY[o.id::text, {run_state("o", "worker_timeout")}]
            FROM outbox_message_t o WHERE o.aggregate_id = schedule
            ORDER BY o.aggregate_version DESC LIMIT 1);
END
$$;
"""
# The previous run of the schedule %(id)s, as the fire path sees it: its id and
# :func:`run_state`; no row when it has none.
PREVIOUS_RUN = f"""SELECT r[1]::uuid, r[2]
FROM (SELECT {PREVIOUS_RUN_OF}(%(id)s::uuid, %(worker_timeout)s::float8) AS r) x
WHERE r IS NOT NULL"""
DROP_PROBES = f"""
DROP FUNCTION IF EXISTS {RUN_GOING}(uuid, float8);
DROP FUNCTION IF EXISTS {PREVIOUS_RUN_OF}(uuid, float8);
"""
