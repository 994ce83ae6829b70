"""The Prometheus series, fed by real loops on a real database (and read back as a scraper
would: prometheus_client's exposition, parsed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_dsched.changes import on_demand
from django_dsched.handlers import registry
from django_dsched.metrics.database import COUNT_LIMIT, DatabaseCollector, read_gauges
from django_dsched.metrics.registry import BatchHistogram
from django_dsched.metrics.relay import relay_metrics
from django_dsched.metrics.scheduler import scheduler_metrics
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports import PermanentDeliveryError
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_batch_histogram_counts_each_value_in_its_bucket_and_exposes_cumulative_buckets():
    histogram = BatchHistogram("t_lag_seconds", "test", [0.1, 1.0, 10.0])
    histogram.observe_many([0.05, 0.1, 0.5, 2.0, 20.0, 30.0])
    histogram.observe_many([])
    registry = CollectorRegistry()
    registry.register(histogram)
    got = samples(registry)
    assert got[("t_lag_seconds_bucket", (("le", "0.1"),))] == 2  # le is inclusive
    assert got[("t_lag_seconds_bucket", (("le", "1.0"),))] == 3
    assert got[("t_lag_seconds_bucket", (("le", "10.0"),))] == 4
    assert got[("t_lag_seconds_bucket", (("le", "+Inf"),))] == 6
    assert got[("t_lag_seconds_count", ())] == 6
    assert got[("t_lag_seconds_sum", ())] == pytest.approx(52.65)


def test_the_scheduler_records_fires_by_topic_and_each_slot_lag_from_the_database_clock(db_now):
    metrics = scheduler_metrics()
    before = {
        "a": value("dsched_fires_total", topic="metrics.a"),
        "b": value("dsched_fires_total", topic="metrics.b"),
        "count": value("dsched_fire_lag_seconds_count"),
        "sum": value("dsched_fire_lag_seconds_sum"),
        "batches": value("dsched_batch_duration_seconds_count"),
        "acquired": value("dsched_leadership_changes_total", change="acquired"),
    }
    start = db_now() - timedelta(seconds=30)
    ScheduleFactory.create_batch(3, start_ts=start, event_topic="metrics.a")
    ScheduleFactory.create_batch(2, start_ts=start, event_topic="metrics.b")
    assert Scheduler(instance_id="m", batch_size=50, metrics=metrics).run_until_idle() == 5

    assert value("dsched_fires_total", topic="metrics.a") - before["a"] == 3
    assert value("dsched_fires_total", topic="metrics.b") - before["b"] == 2
    assert value("dsched_fire_lag_seconds_count") - before["count"] == 5
    # Each lag is the database time of the write minus the slot: exactly what the event
    # table says (event_ts is that statement's time, scheduled_ts the slot).
    (expected,) = sql(
        "SELECT sum(extract(epoch FROM event_ts - scheduled_ts)) FROM event_store_t"
        " WHERE scheduled_ts IS NOT NULL"
    )[0]
    assert value("dsched_fire_lag_seconds_sum") - before["sum"] == pytest.approx(
        float(expected), abs=1e-5
    )
    assert value("dsched_batch_duration_seconds_count") - before["batches"] >= 1
    assert value("dsched_leadership_changes_total", change="acquired") - before["acquired"] == 1


def test_the_scheduler_counts_misfires_and_set_aside_schedules(db_now, unchecked):
    metrics = scheduler_metrics()
    misfires, aside = value("dsched_misfires_total"), value("dsched_set_aside_total")
    # Due for an hour, every minute, coalescing: one fire, the missed slots counted.
    ScheduleFactory(
        start_ts=db_now() - timedelta(hours=1), frequency_unit="MINUTES", frequency_time=1
    )
    poison = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    with unchecked("schedule_t"):  # a time the database refuses now: written before the CHECK
        sql(
            "UPDATE schedule_t SET start_ts = 'infinity' WHERE schedule_id = %s",
            [poison.schedule_id],
        )
    Scheduler(instance_id="m", batch_size=50, metrics=metrics).run_until_idle()
    assert value("dsched_misfires_total") - misfires == 1
    assert value("dsched_set_aside_total") - aside == 1
    assert read_gauges().set_aside == 1


def test_the_scheduler_counts_overlap_decisions_with_no_schedule_label(db_now):
    metrics = scheduler_metrics()
    before = value("dsched_overlap_slots_total", decision="skipped")
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5), overlap_policy="SKIP")
    on_demand.trigger(schedule, actor="test")  # a run now, pending: the previous run goes
    Scheduler(instance_id="m", batch_size=50, metrics=metrics).run_until_idle()
    assert value("dsched_overlap_slots_total", decision="skipped") - before == 1
    schedule.refresh_from_db()
    assert schedule.skip_count == 1
    labels = {
        key
        for (name, labelled), _ in samples(REGISTRY).items()
        if name == "dsched_overlap_slots_total"
        for key, _value in labelled
    }
    assert labels == {"decision"}


def test_metrics_off_means_no_per_topic_query_and_the_same_fires(db_now):
    ScheduleFactory.create_batch(2, start_ts=db_now() - timedelta(seconds=5))
    scheduler = Scheduler(instance_id="plain", batch_size=50)
    assert scheduler.metrics is None
    assert scheduler.run_until_idle() == 2


@pytest.fixture
def handlers(settings):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    settings.DSCHED_RELAY_MAX_ATTEMPTS = 1
    registered = []

    def register(func, **key):
        registry.register(func, **key)
        registered.append((func, key))

    yield register
    for func, key in registered:
        registry.unregister(func, **key)


def test_the_relay_records_outcomes_by_transport_and_slot_to_delivery_latency(db_now, handlers):
    handlers(lambda message: None, topic="metrics.ok")

    def refuse(message):
        raise PermanentDeliveryError("no")

    handlers(refuse, topic="metrics.bad")
    metrics = relay_metrics()
    before = {
        "ok": value("dsched_deliveries_total", transport="handlers", outcome="delivered"),
        "dead": value("dsched_deliveries_total", transport="handlers", outcome="dead_letter"),
        "attempts": value("dsched_delivery_attempts_total", transport="handlers"),
        "count": value("dsched_delivery_latency_seconds_count"),
        "sum": value("dsched_delivery_latency_seconds_sum"),
    }
    start = db_now() - timedelta(seconds=30)
    ScheduleFactory.create_batch(2, start_ts=start, event_topic="metrics.ok")
    ScheduleFactory(start_ts=start, event_topic="metrics.bad")
    Scheduler(instance_id="m", batch_size=50).run_until_idle()
    Relay(instance_id="r", metrics=metrics).run_until_idle()

    assert value("dsched_deliveries_total", transport="handlers", outcome="delivered") == (
        before["ok"] + 2
    )
    assert value("dsched_deliveries_total", transport="handlers", outcome="dead_letter") == (
        before["dead"] + 1
    )
    assert value("dsched_delivery_attempts_total", transport="handlers") == before["attempts"] + 3
    assert value("dsched_delivery_latency_seconds_count") == before["count"] + 2
    # Slot to the database time the delivery was recorded, as the outbox table says.
    (expected,) = sql(
        "SELECT sum(extract(epoch FROM o.delivered_ts - e.scheduled_ts)) FROM outbox_message_t o"
        " JOIN event_store_t e ON e.id = o.id WHERE o.status = 'DELIVERED'"
    )[0]
    assert value("dsched_delivery_latency_seconds_sum") - before["sum"] == pytest.approx(
        float(expected), abs=1e-5
    )


def test_the_database_gauges_read_backlogs_and_dead_letters(db_now, settings):
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    assert read_gauges().due == 0
    ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(minutes=2))
    ScheduleFactory(start_ts=db_now() + timedelta(hours=1))
    make_messages(4, age=90)
    make_messages(2, status="DELIVERY_FAILED")
    sql(
        "UPDATE outbox_message_t SET next_attempt_ts = now() + interval '1 hour'"
        " WHERE id = (SELECT id FROM outbox_message_t WHERE status = 'PENDING' LIMIT 1)"
    )
    gauges = read_gauges()
    assert gauges.due == 3
    assert 110 <= gauges.oldest_due_age <= 300
    assert gauges.outbox_pending == 4
    assert gauges.outbox_ready == 3  # one waits on a backoff
    assert 85 <= gauges.oldest_ready_age <= 300
    assert gauges.dead_letters == 2
    assert gauges.set_aside == 0
    assert COUNT_LIMIT >= 100_000

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    got = samples(registry)
    assert got[("dsched_due_schedules", ())] == 3
    assert got[("dsched_dead_letters", ())] == 2
    assert got[("dsched_outbox_pending_messages", ())] == 4


def test_the_database_gauges_are_cached_for_the_configured_seconds(db_now, settings):
    settings.DSCHED_METRICS_CACHE_SECONDS = 3600
    collector = DatabaseCollector()
    assert collector.gauges().due == 0
    ScheduleFactory(start_ts=db_now() - timedelta(minutes=1))
    assert collector.gauges().due == 0  # the cached answer
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    assert collector.gauges().due == 1


@pytest.mark.django_db(transaction=True)
def test_a_scrape_whose_gauges_fail_in_the_database_still_answers_without_them(settings):
    settings.DSCHED_METRICS_CACHE_SECONDS = 0
    registry = CollectorRegistry()
    registry.register(DatabaseCollector())
    assert "dsched_database_gauges_up 1.0" in generate_latest(registry).decode()
    # A real database error at scrape time (the table the gauges read is gone for a moment):
    # the collector must not take the whole scrape, and the process's own series, with it.
    sql("ALTER TABLE outbox_message_t RENAME TO outbox_message_away")
    try:
        scraped = generate_latest(registry).decode()
    finally:
        sql("ALTER TABLE outbox_message_away RENAME TO outbox_message_t")
    assert "dsched_database_gauges_up 0.0" in scraped
    assert "dsched_due_schedules" not in scraped
