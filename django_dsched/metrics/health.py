"""Schedule health in the metrics, without a series per schedule: how many schedules are in
each state that wants attention (and by topic, the topics bounded), and series of their own
for the schedules marked ``monitored`` (at most ``DSCHED_HEALTH_MONITORED_MAX``).

Read with the database-wide gauges (:class:`~django_dsched.metrics.database.DatabaseCollector`,
same cache, same connection): :func:`read_health` at the read, :func:`families` at each
scrape. The alert rules shipped in ``django_dsched/monitoring/`` use these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError, InterfaceError, OperationalError

from django_dsched.conf import app_settings
from django_dsched.enums import Health
from django_dsched.health.counts import COUNT_LIMIT, COUNTED, Monitored, read_counts, read_monitored
from django_dsched.metrics.labels import BoundedLabel
from django_dsched.runtime.logs import get_logger

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

logger = get_logger(__name__)

# The states a monitored schedule's dsched_schedule_healthy is 1 in.
HEALTHY = (Health.OK.value, Health.NEW.value)
MONITORED_LABELS = ["schedule", "schedule_id"]


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    counts: list[tuple[str, str, int]]  # (state, topic, count)
    monitored_total: int
    monitored: list[Monitored]


def read_health(using: str | None = None) -> HealthSnapshot:
    """The health counts and the monitored schedules' figures, read now."""
    total, shown = read_monitored(int(app_settings.HEALTH_MONITORED_MAX), using)
    return HealthSnapshot(read_counts(COUNT_LIMIT, using), total, shown)


def read_health_or_none(using: str | None = None) -> HealthSnapshot | None:
    """:func:`read_health`, or None when the database refused it (logged): whatever a row
    holds, the other database-wide gauges are still served (``dsched_schedule_health_up``
    says 0). A lost connection is raised, as the gauges' own read does."""
    try:
        return read_health(using)
    except (OperationalError, InterfaceError):
        raise
    except DatabaseError as exc:
        logger.warning("schedule health unreadable: %s", exc)
        return None


def label(state: str) -> str:
    """A state as the metrics' ``health`` label writes it: ``late``, ``set_aside``."""
    return state.lower()


def families(snapshot: HealthSnapshot | None, topics: BoundedLabel) -> Iterator[Metric]:
    from prometheus_client.metrics_core import GaugeMetricFamily

    yield GaugeMetricFamily(
        "dsched_schedule_health_up",
        "1 when the schedules' health was read with the database-wide gauges, else 0.",
        value=0 if snapshot is None else 1,
    )
    if snapshot is None:
        return
    capped = f" (each state counted up to {COUNT_LIMIT:,})"
    totals = GaugeMetricFamily(
        "dsched_schedule_health",
        "Schedules in each health state that wants attention: late, stuck, failing, paused, "
        "set_aside (OK, new and ended ones are not counted)" + capped,
        labels=["health"],
    )
    by_state: dict[str, int] = {state: 0 for state in COUNTED}
    for state, _topic, count in snapshot.counts:
        by_state[state] = by_state.get(state, 0) + count
    for state, count in by_state.items():
        totals.add_metric([label(state)], count)
    yield totals
    by_topic = GaugeMetricFamily(
        "dsched_schedule_health_by_topic",
        "dsched_schedule_health by topic (the topics past DSCHED_METRICS_LABEL_VALUES "
        "under '_other')" + capped,
        labels=["health", "topic"],
    )
    for state in COUNTED:
        folded = topics.fold((t, n) for s, t, n in snapshot.counts if s == state)
        for topic, count in sorted(folded.items()):
            by_topic.add_metric([label(state), topic], count)
    yield from _with_samples(by_topic)
    yield GaugeMetricFamily(
        "dsched_monitored_schedules",
        "Schedules marked monitored (the first DSCHED_HEALTH_MONITORED_MAX by id have series "
        "of their own)",
        value=snapshot.monitored_total,
    )
    yield from _monitored(snapshot.monitored)


def _monitored(rows: list[Monitored]) -> Iterator[Metric]:
    from prometheus_client.metrics_core import GaugeMetricFamily

    healthy = GaugeMetricFamily(
        "dsched_schedule_healthy",
        "A monitored schedule: 1 when its health is OK or new, else 0 (its state in the "
        "health label)",
        labels=[*MONITORED_LABELS, "health"],
    )
    success = GaugeMetricFamily(
        "dsched_schedule_last_success_timestamp_seconds",
        "A monitored schedule's last run that succeeded (a run the relay completed or a "
        "worker reported completed), Unix time; absent until one is recorded",
        labels=MONITORED_LABELS,
    )
    due = GaugeMetricFamily(
        "dsched_schedule_next_due_timestamp_seconds",
        "A monitored schedule's next run, Unix time (absent once it has ended)",
        labels=MONITORED_LABELS,
    )
    interval = GaugeMetricFamily(
        "dsched_schedule_interval_seconds",
        "A monitored schedule's time from its next slot to the one after (absent when it has none)",
        labels=MONITORED_LABELS,
    )
    for row in rows:
        names = [row.name, str(row.schedule_id)]
        healthy.add_metric([*names, label(row.state)], 1 if row.state in HEALTHY else 0)
        if row.last_success is not None:
            success.add_metric(names, row.last_success.timestamp())
        if row.next_due is not None:
            due.add_metric(names, row.next_due.timestamp())
        if row.interval_seconds is not None:
            interval.add_metric(names, row.interval_seconds)
    for family in (healthy, success, due, interval):
        yield from _with_samples(family)


def _with_samples(family: Metric) -> Iterator[Metric]:
    """``family`` if it has a sample: a family of a label's values is left out when no
    value has one (as prometheus_client's own labelled metrics are)."""
    if family.samples:
        yield family
