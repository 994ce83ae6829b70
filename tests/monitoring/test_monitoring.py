"""The alert rules and the Grafana dashboard shipped with the package: the rules pass
`promtool check` and their unit tests (alerts_test.yml: each alert fires after its ``for:``
and not before), and every series the rules and the dashboard read is one the code exports."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

import django_dsched
from django_dsched.metrics.database import DatabaseCollector
from django_dsched.metrics.relay import RelayMetrics
from django_dsched.metrics.scheduler import SchedulerMetrics
from django_dsched.models import ScheduleHealth
from django_dsched.runtime.clock import database_now
from tests.endpoints import prometheus_binary
from tests.factories import ScheduleFactory

MONITORING = Path(django_dsched.__file__).parent / "monitoring"
RULES = MONITORING / "prometheus-alerts.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
HERE = Path(__file__).parent
# A series name the code exports: dsched_ then words (PromQL functions and labels are not).
SERIES = re.compile(r"\bdsched_[a-z0-9_]+\b")


def promtool() -> str:
    return prometheus_binary("promtool")


def test_the_rules_pass_promtool_and_their_unit_tests():
    checked = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tests = yaml.safe_load((HERE / "alerts_test.yml").read_text())["tests"]
    tested_alerts = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert tested_alerts == set(alert_names())  # every alert has a test


def alert_names() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


def exported_series() -> set[str]:
    """Every series name the scheduler's, the relay's and the database collector's families
    can have (a counter's ``_total``, a histogram's ``_bucket``, ``_sum``, ``_count``); a
    late schedule and a monitored one with a success give the labelled families a value."""
    now = database_now()
    late = ScheduleFactory(
        monitored=True, start_ts=now - timedelta(minutes=5), frequency_unit="HOURS"
    )
    ScheduleHealth.objects.create(schedule_id=late.pk, last_success_ts=now)
    registry = CollectorRegistry(auto_describe=False)
    SchedulerMetrics(registry)
    RelayMetrics(registry)
    registry.register(DatabaseCollector())
    names = set()
    for family in registry.collect():
        suffixes = {
            "counter": ["_total"],
            "histogram": ["_bucket", "_sum", "_count"],
        }.get(family.type, [""])
        names |= {family.name + suffix for suffix in suffixes}
    return names


def read_series() -> dict[str, set[str]]:
    """The series names the alert rules and each dashboard query read."""
    rules = yaml.safe_load(RULES.read_text())
    read = {
        f"rule {rule['alert']}": set(SERIES.findall(rule["expr"]))
        for group in rules["groups"]
        for rule in group["rules"]
    }
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            read[f"panel {panel['title']} {target['refId']}"] = set(SERIES.findall(target["expr"]))
    return read


@pytest.mark.django_db
def test_the_rules_and_the_dashboard_read_only_series_the_code_exports():
    exported = exported_series()
    assert {"dsched_schedule_health", "dsched_fires_total", "dsched_leader"} <= exported
    read = read_series()
    unknown = {where: names - exported for where, names in read.items() if names - exported}
    assert not unknown
    assert all(read.values()), [where for where, names in read.items() if not names]
    # The dashboard shows each health state the rules alert on, and the monitored series.
    everything = set().union(*read.values())
    assert {
        "dsched_schedule_health_by_topic",
        "dsched_schedule_last_success_timestamp_seconds",
        "dsched_schedule_next_due_timestamp_seconds",
        "dsched_schedule_healthy",
    } <= everything


def test_the_dashboard_is_importable_json_with_a_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "django-dsched"
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables == ["datasource"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
