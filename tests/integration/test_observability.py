"""Real run_scheduler / run_relay processes serving /metrics and /livez, /readyz: scraped
by a real Prometheus server, and probed while the database goes away and comes back."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from django_dsched.enums import DeliveryStatus, FrequencyUnit
from django_dsched.models import OutboxMessage
from tests.brokers import free_port
from tests.endpoints import DatabaseProxy, Prometheus, get
from tests.factories import ScheduleFactory
from tests.helpers import wait_for
from tests.integration.conftest import database_url

pytestmark = pytest.mark.integration

RELAY_SETTINGS = "--settings=tests.integration.relay_settings"
TOKEN_SETTINGS = "--settings=tests.integration.token_settings"
TOKEN = "scrape-token-for-tests"  # token_settings.DSCHED_METRICS_TOKEN


def finite_values(result: list[dict]) -> list[float]:
    values = [float(r["value"][1]) for r in result]
    return [v for v in values if math.isfinite(v)]


def test_prometheus_scrapes_a_scheduler_and_a_relay_and_answers_the_lag_quantiles(
    cluster, tmp_path, monkeypatch, db_now
):
    monkeypatch.setenv("RELAY_TEST_LOG", str(tmp_path / "deliveries.log"))
    monkeypatch.setenv("RELAY_TEST_DELAY", "0")
    ScheduleFactory.create_batch(
        3,
        start_ts=db_now() + timedelta(seconds=1),
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
    )
    scheduler_port, relay_port = free_port(), free_port()
    # The scheduler's /metrics needs the token (DSCHED_METRICS_TOKEN); the relay's is open.
    cluster.start(
        "leader", TOKEN_SETTINGS, f"--metrics-port={scheduler_port}", "--database-metrics"
    )
    cluster.start("relay", RELAY_SETTINGS, f"--metrics-port={relay_port}", command="run_relay")
    prometheus = Prometheus(
        tmp_path,
        [f"127.0.0.1:{relay_port}"],
        token_targets=[f"127.0.0.1:{scheduler_port}"],
        token=TOKEN,
    )
    try:
        wait_for(
            lambda: OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED).count() >= 6,
            timeout=30,
            what="fires delivered",
        )
        assert get(scheduler_port, "/metrics")[0] == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert get(scheduler_port, "/metrics", headers=bearer)[0] == 200
        assert get(relay_port, "/metrics")[0] == 200
        wait_for(lambda: prometheus.targets_up() == 2, timeout=30, what="both targets up")
        lag = wait_for(
            lambda: finite_values(
                prometheus.query(
                    "histogram_quantile(0.99, rate(dsched_fire_lag_seconds_bucket[1m]))"
                )
            ),
            timeout=60,
            what="the fire lag p99 from Prometheus",
        )
        assert 0 <= lag[0] < 60
        latency = wait_for(
            lambda: finite_values(
                prometheus.query(
                    "histogram_quantile(0.99, rate(dsched_delivery_latency_seconds_bucket[1m]))"
                )
            ),
            timeout=60,
            what="the delivery latency p99 from Prometheus",
        )
        assert 0 <= latency[0] < 60
        fires = wait_for(
            lambda: finite_values(prometheus.query('sum(dsched_fires_total{topic="reports"})')),
            timeout=30,
            what="fires by topic",
        )
        assert fires[0] >= 3
        delivered = prometheus.query(
            'dsched_deliveries_total{transport="handlers",outcome="delivered"}'
        )
        assert finite_values(delivered) and finite_values(delivered)[0] >= 1
        assert finite_values(prometheus.query("dsched_leader")) == [1.0]
        # The database-wide gauges come from the scheduler run with --database-metrics.
        assert finite_values(prometheus.query("dsched_dead_letters")) == [0.0]
    except AssertionError:
        raise AssertionError(cluster.logs() + "\n--- prometheus\n" + prometheus.log()) from None
    finally:
        prometheus.stop()


def socket_path() -> str:
    """The embedded PostgreSQL's Unix socket (the proxy's upstream)."""
    query = parse_qs(urlsplit(database_url()).query)
    directory = query.get("host", [""])[0]
    if not directory.startswith("/"):
        pytest.skip("the health test proxies the embedded server's Unix socket")
    return str(Path(directory) / ".s.PGSQL.5432")


def test_health_endpoints_follow_leadership_and_the_database(cluster):
    proxy = DatabaseProxy(socket_path())
    url = f"postgresql://postgres:@127.0.0.1:{proxy.port}/{connection.settings_dict['NAME']}"
    leader_health, standby_health = free_port(), free_port()
    try:
        cluster.start("leader", f"--health-port={leader_health}", env={"DATABASE_URL": url})

        def ready(port: int, role: str) -> bool:
            status, body = get(port, "/readyz")
            return status == 200 and role in body

        wait_for(lambda: ready(leader_health, "leader"), timeout=30, what="the leader ready")
        cluster.start("standby", f"--health-port={standby_health}")
        wait_for(lambda: ready(standby_health, "standby"), timeout=30, what="a ready standby")
        assert get(leader_health, "/livez")[0] == 200
        assert get(leader_health, "/nothing")[0] == 404

        proxy.cut()  # the leader's database is unreachable: it reconnects, with backoff
        _, body = wait_for(
            lambda: (answer := get(leader_health, "/readyz"))[0] == 503 and answer,
            timeout=30,
            what="the leader not ready while reconnecting",
        )
        assert "not connected" in body
        # Still alive: the loop goes round, backing off; a restart would not help.
        assert get(leader_health, "/livez")[0] == 200
        # Meanwhile the standby takes over once the lease expires, and stays ready.
        wait_for(lambda: ready(standby_health, "leader"), timeout=30, what="the standby leading")

        proxy.restore()
        wait_for(lambda: ready(leader_health, "standby"), timeout=30, what="back, as a standby")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    finally:
        proxy.close()


def test_a_scheduler_with_its_relay_serves_both_loops_series_and_health(
    cluster, tmp_path, monkeypatch, db_now
):
    monkeypatch.setenv("RELAY_TEST_LOG", str(tmp_path / "deliveries.log"))
    monkeypatch.setenv("RELAY_TEST_DELAY", "0")
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    metrics_port, health_port = free_port(), free_port()
    cluster.start(
        "both",
        RELAY_SETTINGS,
        "--with-relay",
        f"--metrics-port={metrics_port}",
        f"--health-port={health_port}",
    )
    try:
        wait_for(
            lambda: OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED).exists(),
            timeout=30,
            what="the fire delivered",
        )

        def scraped() -> str:
            status, text = get(metrics_port, "/metrics")
            return (
                text
                if status == 200 and "dsched_delivery_latency_seconds_count 1.0" in text
                else ""
            )

        text = wait_for(scraped, timeout=10, what="both loops' series")
        values = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        assert values[("dsched_fires_total", (("topic", "reports"),))] == 1
        delivered = (("outcome", "delivered"), ("transport", "handlers"))
        assert values[("dsched_deliveries_total", delivered)] == 1
        assert values[("dsched_leader", ())] == 1
        status, body = get(health_port, "/readyz")
        assert status == 200
        assert "scheduler: ready: leader" in body and "relay: ready: connected" in body
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
