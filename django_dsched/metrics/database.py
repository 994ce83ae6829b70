"""Database-wide gauges, read at scrape time: backlogs, dead letters, set-aside schedules,
and the schedules' health (:mod:`django_dsched.metrics.health`).

These describe the cluster, not a process, so they come from the database when Prometheus
scrapes (:class:`DatabaseCollector`), never from the fire path: one statement of index
probes, its answer kept for ``DSCHED_METRICS_CACHE_SECONDS`` so scrapes by several
Prometheus servers (or of several processes) cost one query per period. Counts stop at
:data:`COUNT_LIMIT` so a huge backlog costs a bounded index walk; the ages say how far
behind the cluster is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.metrics.health import HealthSnapshot, families, read_health_or_none
from django_dsched.metrics.labels import BoundedLabel
from django_dsched.outbox.claims import ALL_IDS, PRIORITIES
from django_dsched.runtime.logs import get_logger

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

# Counts above this read as this (the gauges' help says so).
COUNT_LIMIT = 100_000

logger = get_logger(__name__)

# The ages pass over times at the edges of their type (a row written by hand with
# '-infinity', which cannot be subtracted from): one such row never blinds every gauge.
# Each subquery is an index probe or a bounded index walk:
# due: dsched_schedule_due_idx; set aside: dsched_schedule_set_aside_idx; pending: the
# relays' dsched_outbox_ready_idx, its oldest claimable entry per priority (a skip scan
# over the few priorities); dead letters: dsched_outbox_dead_id_idx.
GAUGES = f"""
WITH {PRIORITIES}
SELECT
    (SELECT count(*) FROM (SELECT FROM schedule_t
                           WHERE active AND next_run_ts <= statement_timestamp()
                           LIMIT %(limit)s) d),
    extract(epoch FROM statement_timestamp() - (
        SELECT next_run_ts FROM schedule_t WHERE active AND isfinite(next_run_ts)
        ORDER BY next_run_ts LIMIT 1)),
    (SELECT count(*) FROM (SELECT FROM schedule_t WHERE state = %(set_aside)s
                           LIMIT %(limit)s) a),
    (SELECT count(*) FROM (SELECT FROM outbox_message_t o
                           WHERE o.status = %(pending)s
                             AND GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until)
                                 <= statement_timestamp()
                           LIMIT %(limit)s) p),
    (SELECT count(*) FROM (SELECT FROM outbox_message_t o
                           WHERE o.status = %(pending)s LIMIT %(limit)s) w),
    extract(epoch FROM statement_timestamp() - (
        SELECT min((SELECT GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until)
                    FROM outbox_message_t o
                    WHERE o.status = %(pending)s AND o.priority = l.priority
                      AND isfinite(GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until))
                    ORDER BY GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until)
                    LIMIT 1))
        FROM levels l WHERE l.priority IS NOT NULL)),
    (SELECT count(*) FROM (SELECT FROM outbox_message_t
                           WHERE status = %(dead)s LIMIT %(limit)s) x)
"""


@dataclass(frozen=True, slots=True)
class Gauges:
    due: int
    oldest_due_age: float  # seconds; 0 when nothing is due
    set_aside: int
    outbox_ready: int
    outbox_pending: int
    oldest_ready_age: float  # seconds; 0 when nothing is claimable
    dead_letters: int


def gauge_params() -> dict[str, Any]:
    """The parameters of :data:`GAUGES`."""
    return {
        "pending": DeliveryStatus.PENDING.value,
        "dead": DeliveryStatus.DELIVERY_FAILED.value,
        "set_aside": ScheduleState.SET_ASIDE.value,
        "limit": COUNT_LIMIT,
        **ALL_IDS,  # the priorities' skip scan, over every pending message
    }


def read_gauges(using: str | None = None) -> Gauges:
    """One read of every database-wide gauge (database clock)."""
    with connections[using or app_settings.DATABASE].cursor() as cursor:
        cursor.execute(GAUGES, gauge_params())
        due, due_age, aside, ready, pending, ready_age, dead = cursor.fetchone()
    return Gauges(
        due=int(due),
        oldest_due_age=max(0.0, float(due_age or 0)),
        set_aside=int(aside),
        outbox_ready=int(ready),
        outbox_pending=int(pending),
        oldest_ready_age=max(0.0, float(ready_age or 0)),
        dead_letters=int(dead),
    )


class DatabaseCollector:
    """A prometheus_client collector of :class:`Gauges`, cached for
    ``DSCHED_METRICS_CACHE_SECONDS``. ``close_connection``: close this thread's database
    connection after each read (the ``--metrics-port`` server's thread: it holds no session
    between scrapes, and a read after an outage starts afresh)."""

    def __init__(self, using: str | None = None, *, close_connection: bool = False) -> None:
        self.using = using
        self.close_connection = close_connection
        self._lock = threading.Lock()
        self._cached: tuple[float, Gauges, HealthSnapshot | None] | None = None
        self.topics = BoundedLabel()  # the health counts' topic label

    def gauges(self) -> Gauges:
        return self._read()[0]

    def _read(self) -> tuple[Gauges, HealthSnapshot | None]:
        """The gauges and the schedules' health (metrics/health.py; None when it could not
        be read: the gauges are served all the same), read together."""
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= app_settings.METRICS_CACHE_SECONDS:
                try:
                    self._cached = (now, read_gauges(self.using), read_health_or_none(self.using))
                finally:
                    if self.close_connection:
                        connections[self.using or app_settings.DATABASE].close()
            return self._cached[1], self._cached[2]

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        try:
            g, health = self._read()
        except DatabaseError as exc:
            # The process's own series (leadership, heartbeat age, errors) matter most while
            # the database is away: the scrape goes on without the database-wide gauges.
            logger.warning("database gauges unreadable: %s", exc)
            yield GaugeMetricFamily(
                "dsched_database_gauges_up",
                "1 when the database-wide gauges were read at this scrape, else 0.",
                value=0,
            )
            return
        yield GaugeMetricFamily(
            "dsched_database_gauges_up",
            "1 when the database-wide gauges were read at this scrape, else 0.",
            value=1,
        )
        capped = f" (counted up to {COUNT_LIMIT:,})"
        yield GaugeMetricFamily(
            "dsched_due_schedules",
            "Active schedules whose run time has come and that have not fired yet" + capped,
            value=g.due,
        )
        yield GaugeMetricFamily(
            "dsched_due_oldest_age_seconds",
            "Seconds since the longest-due active schedule fell due (0: none due).",
            value=g.oldest_due_age,
        )
        yield GaugeMetricFamily(
            "dsched_set_aside_schedules",
            "Schedules set aside because the scheduler cannot plan them" + capped,
            value=g.set_aside,
        )
        yield GaugeMetricFamily(
            "dsched_outbox_ready_messages",
            "Pending outbox messages claimable now (not on a backoff or a claim)" + capped,
            value=g.outbox_ready,
        )
        yield GaugeMetricFamily(
            "dsched_outbox_pending_messages",
            "Pending outbox messages, including those waiting for a retry" + capped,
            value=g.outbox_pending,
        )
        yield GaugeMetricFamily(
            "dsched_outbox_oldest_ready_age_seconds",
            "Seconds the longest-claimable pending message has waited for a relay (0: none).",
            value=g.oldest_ready_age,
        )
        yield GaugeMetricFamily(
            "dsched_dead_letters",
            "Outbox messages that failed for good (DELIVERY_FAILED)" + capped,
            value=g.dead_letters,
        )
        yield from families(health, self.topics)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected at scrape time only, never at registration
