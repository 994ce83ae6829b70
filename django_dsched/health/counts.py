"""The health figures the metrics export: how many schedules are in each state that wants
attention, by topic, and the monitored schedules' own (last success, next due, health).

No series per schedule but for those marked ``monitored`` (at most
``DSCHED_HEALTH_MONITORED_MAX``). The counts read only the schedules in those states, each
part an index range or a small hashed set, never the whole table; OK, NEW and ENDED are not
counted (that would read every schedule). Each part stops at ``limit`` rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connections

from django_dsched.conf import app_settings
from django_dsched.enums import Health, ScheduleState
from django_dsched.health.judge import (
    LAST_SUCCESS,
    RUNS_UNDER_WAY,
    STATE,
    grace,
    held,
    stuck,
    stuck_since,
    with_health,
)
from django_dsched.models import Schedule

# Each part of the counts stops at this many rows (the gauges' help says so).
COUNT_LIMIT = 100_000
# The states counted (the others cost a read of every schedule).
COUNTED = (Health.LATE, Health.STUCK, Health.FAILING, Health.PAUSED, Health.SET_ASIDE)


def counts_sql() -> str:
    """Rows of (state, topic, count) over the schedules in the :data:`COUNTED` states, each
    schedule in its one state (the order of :func:`~.judge.state_sql`); parameter
    ``%(limit)s``: the most rows each part reads."""
    a = "a"
    not_late = f"(a.next_run_ts >= statement_timestamp() - {grace(a)} OR {held(a)})"
    tolerance = int(app_settings.HEALTH_FAILURE_TOLERANCE)
    paused = ScheduleState.PAUSED.value
    return f"""
SELECT state, topic, count(*) FROM (
    (SELECT '{Health.LATE.value}' AS state, a.event_topic AS topic FROM schedule_t a
     WHERE a.active AND a.next_run_ts < statement_timestamp()
       AND a.next_run_ts < statement_timestamp() - {grace(a)} AND NOT {held(a)}
     LIMIT %(limit)s)
    UNION ALL
    (SELECT '{Health.LATE.value}', a.event_topic FROM schedule_t a
     WHERE a.state = '{paused}' AND a.paused_until < statement_timestamp()
       AND a.paused_until < statement_timestamp() - {grace(a)}
     LIMIT %(limit)s)
    UNION ALL
    (SELECT '{Health.PAUSED.value}', a.event_topic FROM schedule_t a
     WHERE a.state = '{paused}'
       AND (a.paused_until IS NULL OR a.paused_until >= statement_timestamp() - {grace(a)})
     LIMIT %(limit)s)
    UNION ALL
    (SELECT '{Health.STUCK.value}', a.event_topic FROM schedule_t a
     WHERE a.schedule_id IN ({RUNS_UNDER_WAY}) AND a.active AND {not_late}
       AND {stuck_since(a)} IS NOT NULL
     LIMIT %(limit)s)
    UNION ALL
    (SELECT '{Health.FAILING.value}', a.event_topic
     FROM schedule_health_t f JOIN schedule_t a ON a.schedule_id = f.schedule_id
     WHERE f.failures > 0 AND f.failures > COALESCE(a.failure_tolerance, {tolerance})
       AND a.active AND {not_late} AND NOT {stuck(a)}
     LIMIT %(limit)s)
    UNION ALL
    (SELECT '{Health.SET_ASIDE.value}', a.event_topic FROM schedule_t a
     WHERE a.state = '{ScheduleState.SET_ASIDE.value}'
     LIMIT %(limit)s)
) c
GROUP BY 1, 2
"""


def read_counts(limit: int, using: str | None = None) -> list[tuple[str, str, int]]:
    """(state, topic, count) of the schedules in the :data:`COUNTED` states (database
    clock); each part stops at ``limit`` rows."""
    with connections[using or app_settings.DATABASE].cursor() as cursor:
        cursor.execute(counts_sql(), {"limit": limit})
        return [(state, topic, int(n)) for state, topic, n in cursor.fetchall()]


@dataclass(frozen=True, slots=True)
class Monitored:
    """One monitored schedule's figures."""

    schedule_id: uuid.UUID
    name: str
    host_id: uuid.UUID
    state: str  # its health
    next_due: datetime | None  # its next run (None unless active or paused)
    last_success: datetime | None  # its last run that succeeded (None: none recorded)
    interval_seconds: float | None  # from its next slot to the one after (None: no more)


def _interval(schedule: Schedule) -> float | None:
    if schedule.state not in (ScheduleState.ACTIVE, ScheduleState.PAUSED):
        return None
    try:
        after = schedule.timetable().slot_after(schedule.next_slot_ts)
    except Exception:  # a timing the scheduler cannot plan: its state says so
        return None
    return None if after is None else (after - schedule.next_slot_ts).total_seconds()


def read_monitored(most: int, using: str | None = None) -> tuple[int, list[Monitored]]:
    """How many schedules are marked monitored (up to ``most`` + 1 counted), and the
    figures of the first ``most`` of them by id (time-ordered: the oldest first)."""
    alias = using or app_settings.DATABASE
    marked = Schedule.objects.using(alias).filter(monitored=True).order_by("pk")
    rows = list(with_health(marked)[: most + 1])
    shown = [
        Monitored(
            schedule_id=row.schedule_id,
            name=row.schedule_name,
            host_id=row.host_id,
            state=getattr(row, STATE),
            next_due=row.next_run_ts
            if row.state in (ScheduleState.ACTIVE, ScheduleState.PAUSED)
            else None,
            last_success=getattr(row, LAST_SUCCESS),
            interval_seconds=_interval(row),
        )
        for row in rows[:most]
    ]
    total = len(rows) if len(rows) <= most else most + _more(alias, most)
    return total, shown


def _more(alias: str, most: int) -> int:
    """How many monitored schedules there are past the first ``most`` (up to 100,000)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT FROM schedule_t WHERE monitored"
            " ORDER BY schedule_id OFFSET %s LIMIT 100000) m",
            [most],
        )
        (n,) = cursor.fetchone()
    return int(n)
