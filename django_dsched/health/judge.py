"""Which state a schedule's health is in, since when and why, judged at read time against the
database's clock from what the product records.

The state is one SQL expression (:func:`state_sql`), so a list can show, filter and count
it in the query that reads the schedules. In order (the first that holds wins):

- ``SET_ASIDE``: the scheduler could not plan it; ``ENDED``: completed or cancelled;
- ``LATE``: it is active and its next run is older than its grace (``health_grace_seconds``,
  else ``DSCHED_HEALTH_GRACE_SECONDS``), or it is paused until a time that passed that long
  ago (nothing resumed it): the scheduler is not firing it;
- ``PAUSED``;
- ``STUCK``: a run of it started longer ago than its maximum run time and has neither
  completed nor failed, and no later run of it has finished;
- ``FAILING``: more failed runs in a row than it tolerates (``schedule_health_t``, kept by
  the relay's settle and the workers' reports);
- ``NEW``: it has not fired yet; ``OK``: the rest.

Each part reads an index: the due index, the paused index, a hashed set of the runs under
way (``dsched_outbox_running_idx``) and of the failing schedules
(``dsched_health_failing_idx``), each read once per statement; a correlated probe only for
the schedules in those sets. :func:`verdict` explains a state (since when, why) from the
facts :func:`with_health` reads with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import CharField, DateTimeField, IntegerField, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from django.utils.translation import gettext as _

from django_dsched.changes.describe import both_times, zone_of
from django_dsched.conf import app_settings
from django_dsched.enums import UNHEALTHY, DeliveryStatus, Health, OverlapPolicy, ScheduleState
from django_dsched.models import Schedule
from django_dsched.models.overlap import going

# Column aliases the annotations of with_health() use (never a model field's name).
STATE, STUCK_SINCE = "dsched_health", "dsched_stuck_since"
FAILURES, FAILING_SINCE, LAST_ERROR = "dsched_failures", "dsched_failing_since", "dsched_error"
LAST_SUCCESS = "dsched_last_success"

# A run under way: started, neither completed nor failed (dsched_outbox_running_idx).
RUNNING = "o.started_ts IS NOT NULL AND o.completed_ts IS NULL AND o.failed_ts IS NULL"
RUNS_UNDER_WAY = f"SELECT o.aggregate_id FROM outbox_message_t o WHERE {RUNNING}"
FAILING_IDS = "SELECT f.schedule_id FROM schedule_health_t f WHERE f.failures > 0"


def _seconds(column: str, default: Any) -> str:
    # The default is a setting: an int, written into the statement as a literal.
    return f"make_interval(secs => COALESCE({column}, {int(default)}))"


def grace(a: str) -> str:
    return _seconds(f"{a}.health_grace_seconds", app_settings.HEALTH_GRACE_SECONDS)


# The overlap policies that hold a due slot while the previous run goes (docs/overlap.md).
HOLDING = (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL, OverlapPolicy.CANCEL_OTHER)


def held(a: str) -> str:
    """``a``'s due slot is held for its previous run (its newest message), as its overlap
    policy says (firing/overlap.decide_overlap): the scheduler came to the slot and held it
    for that run (``held_by``: a scheduler that is not firing the row holds nothing), and the
    run still goes (``models.overlap.going``: a dead relay's or worker's run stops going
    after the visibility or worker timeout). A run no relay has picked up within the grace
    holds nothing either: the slot waits on a delivery that is not happening (no relay for
    its topic, every relay down), which the schedule's health says (LATE). One probe of the
    newest message, only for a row whose policy holds."""
    policies = ", ".join(f"'{p.value}'" for p in HOLDING)
    worker_timeout = str(float(app_settings.OVERLAP_WORKER_TIMEOUT))
    return f"""({a}.overlap_policy IN ({policies}) AND {a}.held_by IS NOT NULL AND EXISTS (
        SELECT FROM (SELECT o.id, o.status, o.attempts, o.claimed_until, o.delivered_ts,
                            o.started_ts, o.completed_ts, o.failed_ts, o.event_ts
                     FROM outbox_message_t o WHERE o.aggregate_id = {a}.schedule_id
                     ORDER BY o.aggregate_version DESC LIMIT 1) o
        WHERE o.id = {a}.held_by AND {going("o", worker_timeout)}
          AND NOT (o.status = '{DeliveryStatus.PENDING.value}' AND o.attempts = 0
                   AND o.event_ts < statement_timestamp() - {grace(a)})))"""


def overdue(a: str) -> str:
    """``a`` is active and its next run passed its grace, though no overlap policy holds it:
    the scheduler is not firing it."""
    return (
        f"({a}.active AND {a}.next_run_ts < statement_timestamp() - {grace(a)} AND NOT {held(a)})"
    )


def late(a: str) -> str:
    """The schedule ``a`` (a table alias) is LATE, state aside."""
    return (
        f"({overdue(a)}"
        f" OR ({a}.state = '{ScheduleState.PAUSED.value}'"
        f" AND {a}.paused_until < statement_timestamp() - {grace(a)}))"
    )


def stuck_since(a: str) -> str:
    """When ``a``'s oldest overrunning run started (NULL: none), for a schedule in the set
    of runs under way: one probe of the running index, and for each run found one probe of
    the schedule's newest messages (a later run that finished clears it)."""
    runtime = _seconds(f"{a}.max_runtime_seconds", app_settings.HEALTH_MAX_RUNTIME_SECONDS)
    return f"""(SELECT min(o.started_ts) FROM outbox_message_t o
        WHERE o.aggregate_id = {a}.schedule_id AND {RUNNING}
          AND o.started_ts < statement_timestamp() - {runtime}
          AND NOT EXISTS (SELECT FROM outbox_message_t n
                          WHERE n.aggregate_id = o.aggregate_id
                            AND n.aggregate_version > o.aggregate_version
                            AND (n.completed_ts IS NOT NULL OR n.failed_ts IS NOT NULL)))"""


def stuck(a: str) -> str:
    return f"({a}.schedule_id IN ({RUNS_UNDER_WAY}) AND {stuck_since(a)} IS NOT NULL)"


def failing(a: str) -> str:
    tolerance = int(app_settings.HEALTH_FAILURE_TOLERANCE)
    return (
        f"({a}.schedule_id IN ({FAILING_IDS}) AND (SELECT h.failures FROM schedule_health_t h"
        f" WHERE h.schedule_id = {a}.schedule_id) > COALESCE({a}.failure_tolerance, {tolerance}))"
    )


def state_sql(a: str = "schedule_t") -> str:
    """The health state of the schedule row ``a`` (a table alias), as text."""
    return f"""(CASE
        WHEN {a}.state = '{ScheduleState.SET_ASIDE.value}' THEN '{Health.SET_ASIDE.value}'
        WHEN {a}.state IN ('{ScheduleState.COMPLETED.value}', '{ScheduleState.CANCELLED.value}')
            THEN '{Health.ENDED.value}'
        WHEN {late(a)} THEN '{Health.LATE.value}'
        WHEN {a}.state = '{ScheduleState.PAUSED.value}' THEN '{Health.PAUSED.value}'
        WHEN {stuck(a)} THEN '{Health.STUCK.value}'
        WHEN {failing(a)} THEN '{Health.FAILING.value}'
        WHEN {a}.last_fired_ts IS NULL THEN '{Health.NEW.value}'
        ELSE '{Health.OK.value}' END)"""


def _health_row(column: str) -> str:
    return (
        f"(SELECT h.{column} FROM schedule_health_t h WHERE h.schedule_id = schedule_t.schedule_id)"
    )


def with_state(queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """``queryset`` with each schedule's health state (``dsched_health``)."""
    return queryset.annotate(**{STATE: RawSQL(state_sql(), [], output_field=CharField())})


def with_health(queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """``queryset`` with each schedule's health state and the facts :func:`verdict` explains
    it with, in the same query (for a page of rows: a few index probes each)."""
    a = "schedule_t"
    if STATE not in queryset.query.annotations:
        queryset = with_state(queryset)
    return queryset.annotate(
        **{
            STUCK_SINCE: RawSQL(
                f"CASE WHEN {a}.schedule_id IN ({RUNS_UNDER_WAY}) THEN {stuck_since(a)} END",
                [],
                output_field=DateTimeField(),
            ),
            FAILURES: RawSQL(_health_row("failures"), [], output_field=IntegerField()),
            FAILING_SINCE: RawSQL(
                _health_row("failing_since_ts"), [], output_field=DateTimeField()
            ),
            LAST_ERROR: RawSQL(_health_row("last_error"), [], output_field=TextField()),
            LAST_SUCCESS: RawSQL(_health_row("last_success_ts"), [], output_field=DateTimeField()),
        }
    )


# Conditions that hold for every schedule in a state and that an index serves: ANDed with
# the state's expression so that a filter reads the few candidates, not the whole table.
_CANDIDATES: dict[str, Q] = {
    Health.LATE: Q(active=True, next_run_ts__lt=Now())
    | Q(state=ScheduleState.PAUSED, paused_until__lt=Now()),
    Health.STUCK: Q(active=True, pk__in=RawSQL(RUNS_UNDER_WAY, [])),
    Health.FAILING: Q(active=True, pk__in=RawSQL(FAILING_IDS, [])),
    Health.PAUSED: Q(state=ScheduleState.PAUSED),
    Health.SET_ASIDE: Q(state=ScheduleState.SET_ASIDE),
    Health.ENDED: Q(state__in=[ScheduleState.COMPLETED, ScheduleState.CANCELLED]),
    Health.NEW: Q(active=True, last_fired_ts__isnull=True),
    Health.OK: Q(active=True, last_fired_ts__isnull=False),
}


def filter_health(queryset: QuerySet[Schedule], *states: str) -> QuerySet[Schedule]:
    """The schedules of ``queryset`` in one of ``states`` (values of :class:`Health`)."""
    wanted = [Health(state).value for state in dict.fromkeys(states)]
    if len(wanted) == 1:
        candidates = _CANDIDATES[wanted[0]]
    else:
        # Several states: the union of each one's candidates (an OR of them would be read
        # as a filter over the whole table; each part of a union reads its own index).
        parts = [Schedule.objects.filter(_CANDIDATES[s]).order_by().values("pk") for s in wanted]
        candidates = Q(pk__in=parts[0].union(*parts[1:], all=True))
    annotated = queryset if STATE in queryset.query.annotations else with_state(queryset)
    return annotated.filter(candidates, **{f"{STATE}__in": wanted})


def unhealthy(queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """The schedules of ``queryset`` that want attention (LATE, STUCK, FAILING, SET_ASIDE)."""
    return filter_health(queryset, *UNHEALTHY)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A schedule's health: its state, since when (None: not known, as for OK), why, and
    the error behind it (a failing run's, the set-aside reason; empty if none): an error
    text can tell of the operator's side, so the REST API shows a tenant its class only."""

    state: str
    since: datetime | None
    reason: str
    error: str = ""

    @property
    def label(self) -> str:
        return str(Health(self.state).label)

    @property
    def text(self) -> str:
        """The reason and the error on one line."""
        return f"{self.reason}: {self.error}" if self.error else self.reason


def _at(moment: datetime | None, schedule: Schedule) -> str:
    """A time of ``schedule`` on its zone's wall clock, then in UTC (as every door says it)."""
    return "-" if moment is None else both_times(moment, zone_of(schedule))


def _grace_of(schedule: Schedule) -> int:
    value = schedule.health_grace_seconds
    return int(app_settings.HEALTH_GRACE_SECONDS if value is None else value)


def verdict(schedule: Schedule) -> Verdict:
    """Since when and why ``schedule`` (read by :func:`with_health`) is in its state."""
    state = getattr(schedule, STATE)
    grace_s = _grace_of(schedule)
    if state == Health.LATE:
        if schedule.state == ScheduleState.PAUSED and schedule.paused_until is not None:
            return Verdict(
                state,
                schedule.paused_until + timedelta(seconds=grace_s),
                _("its pause ended at %(at)s and it has not resumed (grace %(grace)d s)")
                % {"at": _at(schedule.paused_until, schedule), "grace": grace_s},
            )
        return Verdict(
            state,
            schedule.next_run_ts + timedelta(seconds=grace_s),
            _("the run due at %(at)s has not fired (grace %(grace)d s)")
            % {"at": _at(schedule.next_run_ts, schedule), "grace": grace_s},
        )
    if state == Health.STUCK:
        started = getattr(schedule, STUCK_SINCE)
        runtime = schedule.max_runtime_seconds or app_settings.HEALTH_MAX_RUNTIME_SECONDS
        return Verdict(
            state,
            None if started is None else started + timedelta(seconds=int(runtime)),
            _("a run started at %(at)s has not finished (longest run %(runtime)d s)")
            % {"at": _at(started, schedule), "runtime": int(runtime)},
        )
    if state == Health.FAILING:
        tolerance = schedule.failure_tolerance
        if tolerance is None:
            tolerance = app_settings.HEALTH_FAILURE_TOLERANCE
        return Verdict(
            state,
            getattr(schedule, FAILING_SINCE),
            _("%(count)d failed runs in a row (%(tolerated)d tolerated); the last one")
            % {"count": getattr(schedule, FAILURES) or 0, "tolerated": int(tolerance)},
            getattr(schedule, LAST_ERROR) or "",
        )
    return _settled_verdict(schedule, state)


def _settled_verdict(schedule: Schedule, state: str) -> Verdict:
    """The states read from the schedule's own columns."""
    if state == Health.SET_ASIDE:
        return Verdict(
            state,
            schedule.set_aside_ts,
            _("the scheduler could not plan it"),
            schedule.set_aside_reason,
        )
    if state == Health.PAUSED:
        until = (
            _("until %(at)s") % {"at": _at(schedule.paused_until, schedule)}
            if schedule.paused_until
            else _("until resumed")
        )
        why = f"{schedule.paused_reason}; {until}" if schedule.paused_reason else until
        return Verdict(state, schedule.updated_ts, why)
    if state == Health.ENDED:
        ended = max(
            (t for t in (schedule.last_fired_ts, schedule.updated_ts) if t is not None),
            default=None,
        )
        return Verdict(state, ended, str(schedule.get_state_display()))
    if state == Health.NEW:
        return Verdict(
            state,
            schedule.created_ts,
            _("has not fired yet; first run due at %(at)s")
            % {"at": _at(schedule.next_run_ts, schedule)},
        )
    if schedule.held_by is not None:
        # Its overlap policy holds the slot: the policy working, not a miss (docs/health).
        return Verdict(
            state,
            None,
            _("the slot due at %(at)s waits for run %(run)s to end (overlap policy %(policy)s)")
            % {
                "at": _at(schedule.next_run_ts, schedule),
                "run": str(schedule.held_by)[:8],
                "policy": schedule.overlap_policy,
            },
        )
    return Verdict(
        state,
        None,
        _("last fired at %(at)s; next run due at %(next)s")
        % {
            "at": _at(schedule.last_fired_ts, schedule),
            "next": _at(schedule.next_run_ts, schedule),
        },
    )


def judge(schedule: Schedule) -> Verdict:
    """The health of one schedule (one query)."""
    read = with_health(Schedule.objects.filter(pk=schedule.pk)).get()
    return verdict(read)
