"""No label a tenant decides grows the series without bound (issue 39): the first
DSCHED_METRICS_LABEL_VALUES values get series of their own, the rest count under ``_other``,
so series and scrape stay flat whatever topics tenants make. Read back as a scraper would:
prometheus_client's exposition, parsed."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_dsched.firing.batch import BatchResult
from django_dsched.metrics.labels import OTHER
from django_dsched.metrics.relay import RelayMetrics
from django_dsched.metrics.scheduler import SchedulerMetrics
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory

TOPICS = 100_000
BATCH = 1_000
CAP = 100  # DSCHED_METRICS_LABEL_VALUES's default
# The scheduler's series with a full cap of 126-character topics (the longest a topic can
# be): 40 KB measured (19 KB with 20-character topics); with no fires at all, 6 KB.
SCRAPE_LIMIT = 48 * 1024


def series(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples called ``name`` by their labels."""
    text = generate_latest(registry).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_a_hundred_thousand_topics_add_a_hundred_and_one_series_and_a_flat_scrape():
    """100 batches of 1,000 fires, each of a topic never seen before, fed the way the loop
    feeds them (``SchedulerMetrics.batch``): 101 series of dsched_fires_total (100 topics
    and _other), every fire counted, and the whole scrape under 48 KB (without the cap:
    100,000 series, 12.7 MB of scrape)."""
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    for batch in range(TOPICS // BATCH):
        topics = {f"tenant-{batch:03d}-{i:03d}.".ljust(126, "x"): 1 for i in range(BATCH)}
        metrics.batch(BatchResult(BATCH, BATCH, 0, False, topics=topics), 0.01)
    fires = series(registry, "dsched_fires_total")
    assert len(fires) == CAP + 1
    assert sum(fires.values()) == TOPICS
    assert fires[(("topic", OTHER),)] == TOPICS - CAP
    scrape = generate_latest(registry)
    assert len(scrape) < SCRAPE_LIMIT, len(scrape)
    # More of the same topics, and more new ones, change no size.
    metrics.batch(BatchResult(BATCH, BATCH, 0, False, topics=topics), 0.01)
    assert len(series(registry, "dsched_fires_total")) == CAP + 1
    assert len(generate_latest(registry)) <= len(scrape) + 2 * CAP  # wider numbers only


@pytest.mark.django_db(transaction=True)
def test_real_batches_count_the_topics_past_the_cap_under_other(settings, db_now):
    settings.DSCHED_METRICS_LABEL_VALUES = 2
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    start = db_now() - timedelta(seconds=30)
    for topic in ("bound.a", "bound.b", "bound.c", "bound.d", "bound.e"):
        ScheduleFactory(start_ts=start, event_topic=topic)
    assert Scheduler(instance_id="bounded", batch_size=50, metrics=metrics).run_until_idle() == 5
    fires = series(registry, "dsched_fires_total")
    assert sorted(fires.values()) == [1, 1, 3]
    assert fires[(("topic", OTHER),)] == 3
    assert len(fires) == 3


def test_no_topic_name_at_all_with_a_cap_of_zero(settings):
    settings.DSCHED_METRICS_LABEL_VALUES = 0
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    metrics.batch(BatchResult(2, 2, 0, False, topics={"secret.a": 1, "secret.b": 1}), 0.01)
    assert series(registry, "dsched_fires_total") == {(("topic", OTHER),): 2}
    assert b"secret" not in generate_latest(registry)


def test_the_relays_transport_label_is_bounded_too(settings):
    settings.DSCHED_METRICS_LABEL_VALUES = 3
    registry = CollectorRegistry()
    metrics = RelayMetrics(registry)
    for index in range(1000):
        metrics.attempted(f"transport-{index}", 1)
        metrics.settled(Counter({(f"transport-{index}", "delivered"): 1}), [0.1])
    attempts = series(registry, "dsched_delivery_attempts_total")
    deliveries = series(registry, "dsched_deliveries_total")
    assert len(attempts) == len(deliveries) == 4
    assert attempts[(("transport", OTHER),)] == 997
    assert deliveries[(("outcome", "delivered"), ("transport", OTHER))] == 997
