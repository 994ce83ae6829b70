"""What a tenant reads is about its own schedules: no answer of the API shows a tenant (a
user without the cluster's permission) the scheduler instance that fired, the relay that
holds a message, a staff member's name, or the text of an error from the operator's code,
endpoints and database. A user with the cluster's permission reads them all."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import DeliveryStatus
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.helpers import sql
from tests.rest.conftest import APIClient, user_with
from tests.rest.hosts import HOST_A

pytestmark = pytest.mark.django_db

INSTANCE = "node-7.internal:4242"  # the scheduler instance that fires (host:pid)
RELAY = "relay-9.internal:777"  # the relay holding a message
STAFF = "ops-alice"  # a staff member who paused a tenant's schedule
ERROR = "ConnectError: [Errno 111] connecting to 10.0.3.4:8443 (billing-handler.py line 12)"
ZONE = "Mars/Olympus"  # a zone no tzdata has: the scheduler sets the schedule aside
# Nothing a tenant reads may hold any of these.
SECRETS = (INSTANCE, RELAY, STAFF, "10.0.3.4", "billing-handler", ZONE)
READS = ("view_schedule", "view_outboxmessage", "pause_schedule", "retry_outboxmessage")
COMMON = {"topic": "billing", "event_type": "invoice.due", "host_id": HOST_A}


@pytest.fixture(autouse=True)
def resolver(settings: Any) -> None:
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"


def fire() -> None:
    """One batch of the scheduler, as the instance ``INSTANCE``."""
    lease = LeaseHolder(
        connection, lease_id=1, instance_id=INSTANCE, lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    with transaction.atomic(), connection.cursor() as cursor:
        fire_batch(cursor, Fence(1, INSTANCE, lease.epoch, 30.0), 50)


@pytest.fixture
def world() -> dict[str, str]:
    """Host A's schedules: one fired by the scheduler, paused by staff, resumed by a tenant
    user, run by code, whose delivery failed with an operator's error and is claimed by a
    relay; one set aside by the scheduler."""
    staff = user_with(["pause_schedule"], name=STAFF, is_staff=True)
    tenant_user = user_with(["pause_schedule"], name="bob-a")
    start = database_now() - timedelta(minutes=3)
    billed = api.create_interval("billing", every=1, key="bill", start=start, **COMMON)
    broken = api.create_cron("broken", cron="* * * * *", key="broken", start=start, **COMMON)
    sql("UPDATE schedule_t SET time_zone = %s WHERE schedule_id = %s", [ZONE, broken.pk])
    fire()
    assert Schedule.objects.get(pk=broken.pk).state == "SET_ASIDE"
    api.pause(billed, actor=staff, reason="maintenance")
    api.resume(billed, actor=tenant_user)
    api.trigger(billed)  # code: no actor
    OutboxMessage.objects.filter(aggregate_id=billed.pk).update(
        status=DeliveryStatus.DELIVERY_FAILED, last_error=ERROR, claimed_by=RELAY
    )
    message = OutboxMessage.objects.filter(aggregate_id=billed.pk).order_by("id").first()
    assert message is not None
    return {"billed": str(billed.pk), "broken": str(broken.pk), "message": str(message.pk)}


def read_all(client: APIClient, ids: dict[str, str]) -> dict[str, Any]:
    """Every answer that carries history, deliveries, errors or status, by name."""
    billed, broken, message = ids["billed"], ids["broken"], ids["message"]
    answers = {
        "events": client.get(f"schedules/{billed}/events/"),
        "aside events": client.get(f"schedules/{broken}/events/"),
        "deliveries": client.get(f"schedules/{billed}/deliveries/"),
        "outbox": client.get("outbox/"),
        "message": client.get(f"outbox/{message}/"),
        "status": client.get("schedules/status/", {"key": "bill"}),
        "aside status": client.get("schedules/status/", {"key": "broken"}),
        "resume aside": client.post(f"schedules/{broken}/resume/", {}),
        "retry": client.post(f"outbox/{message}/retry/"),
    }
    expected = {"resume aside": 409}
    for name, response in answers.items():
        assert response.status_code == expected.get(name, 200), (name, response.body)
    return {name: response.body for name, response in answers.items()}


def test_a_tenant_reads_nothing_of_the_operators_machines_code_or_staff(world):
    tenant = APIClient(user_with(READS, name="carol-a"))
    found = read_all(tenant, world)

    text = json.dumps(found)
    assert [secret for secret in SECRETS if secret in text] == []
    # Who acted: what, not who.
    actors = [event["actor"] for event in found["events"]["results"]]
    assert set(actors) == {"scheduler", "staff", "api", "system"}, actors
    assert all(e["leader_epoch"] is None for e in found["events"]["results"])
    aside = next(e for e in found["aside events"]["results"] if e["kind"] == "change")
    assert (aside["actor"], aside["payload"]["actor"]) == ("scheduler", "scheduler")
    assert aside["payload"]["error"].startswith("CronError: ")
    # Errors: their class and a general sentence.
    for row in [*found["deliveries"]["results"], *found["outbox"]["results"], found["message"]]:
        assert row["claimed_by"] is None
        assert row["last_error"] in ("", "ConnectError: the details are shown to the operator only")
    assert found["message"]["last_error"].startswith("ConnectError: ")
    assert found["retry"]["last_error"].startswith("ConnectError: ")
    assert found["status"]["last_error"].startswith("ConnectError: ")
    assert found["aside status"]["set_aside_reason"].startswith("CronError: ")
    assert "CronError" in found["resume aside"]["detail"]


def test_a_user_with_the_cluster_permission_reads_all_of_it(world):
    operator = APIClient(user_with((*READS, "view_schedulerinstance"), name="op-a"))
    found = read_all(operator, world)

    actors = {event["actor"] for event in found["events"]["results"]}
    assert {INSTANCE, STAFF, "bob-a", "system"} <= actors
    assert found["message"]["claimed_by"] == RELAY
    assert found["message"]["last_error"] == ERROR
    assert found["status"]["last_error"] == ERROR
    assert ZONE in found["aside status"]["set_aside_reason"]
    assert ZONE in found["resume aside"]["detail"]
    assert any(e["leader_epoch"] is not None for e in found["events"]["results"])


def test_a_staff_user_is_staff_and_a_gone_account_is_system(world):
    User.objects.filter(username="bob-a").delete()
    User.objects.filter(username=STAFF).update(is_staff=False, is_superuser=True)
    tenant = APIClient(user_with(READS, name="carol-a"))
    events = tenant.get(f"schedules/{world['billed']}/events/", {"kind": "change"}).body
    by_type = {e["type"]: e["actor"] for e in events["results"]}
    assert by_type["dsched.schedule.paused"] == "staff"  # a superuser counts as staff
    assert by_type["dsched.schedule.resumed"] == "system"  # its account no longer exists
    assert by_type["dsched.schedule.created"] == "system"  # code


def test_a_page_of_events_reads_its_actors_in_one_query(world):
    tenant = APIClient(user_with(READS, name="carol-a"))
    path = f"schedules/{world['billed']}/events/"

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert tenant.get(path).status_code == 200
        return len(captured)

    before = queries()
    billed = Schedule.objects.get(pk=world["billed"])
    for n in range(5):
        api.pause(billed, actor=user_with(["pause_schedule"], name=f"user-{n}"))
        api.resume(billed)
    assert queries() == before  # 7 users on the page instead of 2: one query all the same
