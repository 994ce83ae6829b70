"""Schedule health through the REST API: in a schedule, its list (and a filter), the status
by key; the thresholds written like any other field, bad ones refused at the door; a
failing run's error whole to an operator, its class only to a tenant."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import Health
from django_dsched.models import ScheduleHealth
from tests.health.make import db_now, late_and_new
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db


def test_a_schedule_and_the_list_show_health_and_filter_on_it(root):
    late, _new = late_and_new()
    found = root.get(f"schedules/{late.pk}/")
    assert found.status_code == 200
    health = found.body["health"]
    assert health["state"] == Health.LATE and "has not fired" in health["reason"]
    assert health["since"].startswith(
        (late.next_run_ts + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%S")
    )
    listed = root.get("schedules/").body["results"]
    assert {s["name"]: s["health"]["state"] for s in listed} == {"late": "LATE", "new": "NEW"}
    for wanted, names in (("LATE", ["late"]), ("NEW", ["new"]), ("UNHEALTHY", ["late"])):
        answer = root.get("schedules/", {"health": wanted})
        assert [s["name"] for s in answer.body["results"]] == names, wanted
    assert root.get("schedules/", {"health": "SICK"}).status_code == 400
    status = root.get("schedules/status/", {"key": "late-key"}).body
    assert status["health"] == "LATE" and "has not fired" in status["health_reason"]
    assert status["health_since"] is not None and status["last_success"] is None


def test_a_failing_runs_error_is_whole_to_an_operator_and_its_class_to_a_tenant(root, api_as):
    late, _new = late_and_new()
    late.last_fired_ts = db_now()
    late.next_run_ts = late.next_slot_ts = db_now() + timedelta(hours=1)
    late.save()
    ScheduleHealth.objects.create(
        schedule_id=late.pk,
        failures=2,
        failing_since_ts=db_now(),
        last_error="ConnectError: [Errno 111] connection refused by 10.0.0.7:8443",
    )
    health = root.get(f"schedules/{late.pk}/").body["health"]
    assert health["state"] == Health.FAILING
    assert health["error"] == "ConnectError: [Errno 111] connection refused by 10.0.0.7:8443"
    tenant = api_as("view_schedule")
    seen = tenant.get(f"schedules/{late.pk}/").body["health"]
    assert seen["error"] == "ConnectError: the details are shown to the operator only"
    listed = tenant.get("schedules/", {"health": "FAILING"}).body["results"]
    assert listed[0]["health"]["error"].startswith("ConnectError: the details")
    status = tenant.get("schedules/status/", {"key": "late-key"}).body
    assert status["health"] == "FAILING" and "10.0.0.7" not in status["health_error"]


def test_the_thresholds_are_fields_like_any_other(root):
    created = root.post(
        "schedules/",
        {
            **INTERVAL,
            "health_grace_seconds": 300,
            "failure_tolerance": 2,
            "max_runtime_seconds": 60,
            "monitored": True,
        },
    )
    assert created.status_code == 201, created.body
    body = created.body
    assert (body["health_grace_seconds"], body["failure_tolerance"]) == (300, 2)
    assert (body["max_runtime_seconds"], body["monitored"]) == (60, True)
    changed = root.patch(
        f"schedules/{body['id']}/",
        {"monitored": False, "health_grace_seconds": None},
        **{"If-Match": f'"{body["version"]}"'},
    )
    assert changed.status_code == 200, changed.body
    assert (changed.body["monitored"], changed.body["health_grace_seconds"]) == (False, None)
    for field, value in (
        ("health_grace_seconds", -1),
        ("failure_tolerance", -1),
        ("max_runtime_seconds", 0),
        ("monitored", "yes"),
    ):
        refused = root.post("schedules/", {**INTERVAL, "name": f"bad-{field}", field: value})
        assert refused.status_code == 400 and field in refused.body["errors"], field
