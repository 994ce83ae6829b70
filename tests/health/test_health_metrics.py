"""Schedule health in the metrics: counts by state and (bounded) topic, the monitored
schedules' series, and a health read the database refuses that blinds nothing else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_dsched.metrics.database import DatabaseCollector
from tests.factories import ScheduleFactory
from tests.health.make import db_now
from tests.helpers import sql

pytestmark = pytest.mark.django_db


def scrape() -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counts_by_state_and_bounded_topic_and_the_monitored_series(settings):
    settings.DSCHED_METRICS_LABEL_VALUES = 1
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    now = db_now()
    for topic in ("billing", "mail", "mail"):
        ScheduleFactory(
            event_topic=topic, start_ts=now - timedelta(minutes=5), frequency_unit="HOURS"
        )
    watched = ScheduleFactory(
        schedule_name="nightly",
        monitored=True,
        start_ts=now + timedelta(minutes=30),
        frequency_unit="HOURS",
    )
    ScheduleFactory(paused=True, start_ts=now)
    values = scrape()
    assert values[("dsched_schedule_health", (("health", "late"),))] == 3
    assert values[("dsched_schedule_health", (("health", "paused"),))] == 1
    assert values[("dsched_schedule_health", (("health", "failing"),))] == 0
    assert values[("dsched_schedule_health_up", ())] == 1
    by_topic = {labels: v for (name, labels), v in values.items() if name.endswith("_by_topic")}
    # One topic gets a series of its own (DSCHED_METRICS_LABEL_VALUES = 1), the rest _other.
    late = {dict(k)["topic"]: v for k, v in by_topic.items() if dict(k)["health"] == "late"}
    assert sum(late.values()) == 3 and len(late) == 2 and "_other" in late
    assert values[("dsched_monitored_schedules", ())] == 1
    labels = (("schedule", "nightly"), ("schedule_id", str(watched.pk)))
    assert values[("dsched_schedule_next_due_timestamp_seconds", labels)] == pytest.approx(
        watched.next_run_ts.timestamp()
    )
    assert values[("dsched_schedule_interval_seconds", labels)] == 3600
    assert values[("dsched_schedule_healthy", (("health", "new"), *labels))] == 1
    assert ("dsched_schedule_last_success_timestamp_seconds", labels) not in values  # none yet


def test_a_health_read_the_database_refuses_leaves_the_other_gauges(settings):
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    ScheduleFactory(start_ts=db_now() - timedelta(minutes=5), frequency_unit="HOURS")
    sql("ALTER TABLE schedule_health_t RENAME TO schedule_health_away")  # undone at the end
    values = scrape()
    assert values[("dsched_database_gauges_up", ())] == 1
    assert values[("dsched_due_schedules", ())] == 1
    assert values[("dsched_schedule_health_up", ())] == 0
    assert not [name for name, _labels in values if name == "dsched_schedule_health"]
