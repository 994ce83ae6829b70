"""Schedule health end to end: real run_scheduler and run_relay processes, a real Prometheus
loading the shipped alert rules (their ``for:`` windows shortened to 2 s). A handler that
always fails makes its schedule FAILING and fires DschedSchedulesFailing; freezing the owner
of some buckets (SIGSTOP) makes its schedules LATE, and DschedSchedulesLate fires within
its window, while the other instance's schedules stay OK."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

import django_dsched
from django_dsched.enums import FrequencyUnit, Health
from django_dsched.health import judge
from django_dsched.models import Schedule
from tests.brokers import free_port
from tests.endpoints import Prometheus
from tests.factories import ScheduleFactory
from tests.helpers import wait_for
from tests.integration.stopping import stop_together
from tests.integration.test_frozen_peer import BUCKETS, both_hold

pytestmark = pytest.mark.integration

SETTINGS = "--settings=tests.integration.health_settings"
ENV = {"DSCHED_TEST_BUCKETS": str(BUCKETS)}
RULES = Path(django_dsched.__file__).parent / "monitoring" / "prometheus-alerts.yml"
WINDOW = 2  # seconds: every rule's for: in this test


def short_rules(directory: Path) -> Path:
    """The shipped rules with every ``for:`` shortened to :data:`WINDOW` seconds."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = f"{WINDOW}s"
    path = directory / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


def late_count(prometheus: Prometheus) -> float:
    found = prometheus.query('max(dsched_schedule_health{health="late"})')
    return float(found[0]["value"][1]) if found else 0.0


def test_a_failing_handler_and_a_frozen_owner_fire_their_alerts(
    cluster, tmp_path, monkeypatch, db_now
):
    monkeypatch.setenv("RELAY_TEST_LOG", str(tmp_path / "deliveries.log"))
    monkeypatch.setenv("RELAY_TEST_DELAY", "0")
    start = db_now() + timedelta(seconds=2)
    every_second = ScheduleFactory.create_batch(
        16,
        start_ts=start,
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        health_grace_seconds=1,  # LATE a second past a run time
    )
    broken = ScheduleFactory(
        schedule_name="broken",
        event_topic="broken",
        start_ts=start,
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=2,
    )
    metrics = free_port()
    instances = {name: cluster.start(name, SETTINGS, env=ENV) for name in ("a", "b")}
    cluster.start(
        "relay",
        SETTINGS,
        f"--metrics-port={metrics}",
        "--database-metrics",
        command="run_relay",
        env=ENV,
    )
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{metrics}"], rule_files=[short_rules(tmp_path)])
    try:
        held = wait_for(both_hold, timeout=30, what="each bucket held by its owner")
        wait_for(lambda: prometheus.targets_up() == 1, timeout=30, what="the relay scraped")

        # The handler that always fails: its schedule is FAILING, and the alert fires.
        wait_for(
            lambda: judge.judge(broken).state == Health.FAILING,
            timeout=30,
            what="the broken schedule failing",
        )
        wait_for(
            lambda: "DschedSchedulesFailing" in prometheus.firing(),
            timeout=30,
            what="DschedSchedulesFailing firing",
        )
        assert "DschedSchedulesLate" not in prometheus.firing()
        assert all(judge.judge(s).state == Health.OK for s in every_second)

        # Freeze the owner of bucket 0: its schedules stop firing and turn LATE.
        # (The owner of a bucket that holds a schedule: bucket keys follow the random ids, and
        # with 16 schedules the one bucket an owner may hold is empty about once in a hundred.)
        frozen = held[every_second[0].bucket_key % BUCKETS]
        theirs = {b for b, name in held.items() if name == frozen}
        frozen_schedules = [s for s in every_second if s.bucket_key % BUCKETS in theirs]
        others = [s for s in every_second if s.bucket_key % BUCKETS not in theirs]
        assert frozen_schedules, "no schedule in the frozen owner's buckets"
        instances[frozen].signal(signal.SIGSTOP)
        wait_for(
            lambda: all(judge.judge(s).state == Health.LATE for s in frozen_schedules),
            timeout=15,
            what="the frozen owner's schedules late",
        )
        assert all(judge.judge(s).state == Health.OK for s in others)
        seen_late = wait_for(
            lambda: late_count(prometheus) >= len(frozen_schedules) and time.monotonic(),
            timeout=15,
            what="Prometheus counting the late schedules",
        )
        fired = wait_for(
            lambda: "DschedSchedulesLate" in prometheus.firing() and time.monotonic(),
            timeout=15,
            what="DschedSchedulesLate firing",
        )
        # Within its window (and an evaluation or two: rules are evaluated every second).
        assert fired - seen_late <= WINDOW + 3, fired - seen_late
        verdict = judge.judge(Schedule.objects.get(pk=frozen_schedules[0].pk))
        assert "has not fired" in verdict.reason and verdict.since is not None
    except AssertionError as exc:
        logs = cluster.logs() + "\n--- prometheus\n" + prometheus.log()
        raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        stop_together(cluster.instances.values())  # not one after another, as the fixture would
        prometheus.stop()
