"""The outbox over REST: list by status and topic, read, retry and discard dead letters
(the admin's dead_letters functions); the cluster page as JSON."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Lease, OutboxMessage, SchedulerInstance
from django_dsched.runtime.clock import database_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def messages() -> list[OutboxMessage]:
    """120 messages of one backfill, written by one statement: all share one event_ts."""
    start = (database_now() - timedelta(hours=3)).replace(microsecond=0)
    schedule = api.create_interval(
        "busy", every=1, unit="MINUTES", start=start, topic="billing", event_type="invoice"
    )
    api.backfill(schedule, start, start + timedelta(minutes=119))
    other = api.create_interval("other", every=1, topic="mail", event_type="send")
    api.trigger(other)
    return list(OutboxMessage.objects.order_by("topic", "aggregate_version"))  # mail last


def test_pages_of_messages_sharing_one_time_miss_and_repeat_nothing(root, messages):
    assert len({m.event_ts for m in messages if m.topic == "billing"}) == 1
    seen, url = [], "outbox/?page_size=50&topic=billing"
    while url:
        response = root.get(url)
        assert response.status_code == 200
        seen += [row["id"] for row in response.body["results"]]
        url = response.body["next"]
    assert len(seen) == len(set(seen)) == 120


def test_dead_letters_are_listed_retried_and_discarded(root, messages):
    dead = messages[:3]
    OutboxMessage.objects.filter(pk__in=[m.pk for m in dead]).update(
        status=DeliveryStatus.DELIVERY_FAILED, attempts=10, last_error="HTTP 500"
    )
    listed = root.get("outbox/?status=DELIVERY_FAILED").body["results"]
    assert sorted(row["id"] for row in listed) == sorted(str(m.pk) for m in dead)
    assert listed[0]["last_error"] == "HTTP 500" and "payload" not in listed[0]
    detail = root.get(f"outbox/{dead[0].pk}/").body
    assert detail["payload"]["id"] == str(dead[0].pk)  # the CloudEvent

    response = root.post(f"outbox/{dead[0].pk}/retry/")
    assert response.status_code == 200
    assert (response.body["status"], response.body["attempts"]) == ("PENDING", 0)
    assert root.post(f"outbox/{dead[0].pk}/retry/").status_code == 409

    assert root.post(f"outbox/{dead[1].pk}/discard/").status_code == 204
    assert not OutboxMessage.objects.filter(pk=dead[1].pk).exists()
    assert root.post(f"outbox/{dead[1].pk}/discard/").status_code == 404
    response = root.post(f"outbox/{messages[-1].pk}/discard/")
    assert response.status_code == 409 and response.body["code"] == "state_conflict"
    assert OutboxMessage.objects.filter(pk=messages[-1].pk).exists()


def test_the_outbox_filters_by_schedule(root, messages):
    other = messages[-1]
    response = root.get(f"outbox/?schedule={other.aggregate_id}")
    assert [row["id"] for row in response.body["results"]] == [str(other.pk)]
    assert root.get("outbox/?schedule=nope").status_code == 400


@pytest.mark.parametrize(
    "cursor",
    ["WyIyMDI2LTAxLTAxIDAwOjAwOjAwIiwgIjEyMyJd", "WyJub3QgYSB0aW1lIiwgIngiXQ", "WzEsMl0"],
    ids=["naive time", "not a time", "not text"],
)
def test_a_forged_cursor_is_400(root, messages, cursor):
    response = root.get(f"outbox/?cursor={cursor}")
    assert response.status_code == 400
    assert "cursor" in response.body["errors"]


def test_the_cluster_shows_the_leader_the_instances_and_the_backlog(root, messages):
    now = database_now()
    Lease.objects.create(lease_id=1, instance_id="node-1", last_heartbeat=now, epoch=7)
    for name, role in (("node-1", "leader"), ("node-2", "standby")):
        SchedulerInstance.objects.create(
            instance_id=name, role=role, hostname="h", pid=1, started_ts=now, last_seen_ts=now
        )
    body: dict[str, Any] = root.get("cluster/").body
    assert body["leader"]["instance_id"] == "node-1" and body["leader"]["epoch"] == 7
    assert body["leader"]["live"] is True
    assert [i["instance_id"] for i in body["instances"]] == ["node-1", "node-2"]
    assert body["backlog"]["pending"] == OutboxMessage.objects.count()
    assert body["backlog"]["due"] >= 1  # "busy" started in the past
    assert timezone.datetime.fromisoformat(body["now"]) >= now


def test_a_message_shows_its_run_phases(root, messages):
    picked, done, waiting = messages[0], messages[1], messages[2]
    OutboxMessage.objects.filter(pk=picked.pk).update(
        picked_ts=picked.event_ts + timedelta(seconds=2)
    )
    OutboxMessage.objects.filter(pk=done.pk).update(
        status=DeliveryStatus.DELIVERED,
        delivered_ts=done.event_ts + timedelta(seconds=5),
        picked_ts=done.event_ts + timedelta(seconds=1),
        started_ts=done.event_ts + timedelta(seconds=2),
        completed_ts=done.event_ts + timedelta(seconds=4.5),
    )
    body = root.get(f"outbox/{done.pk}/").body
    assert body["run_status"] == "SUCCEEDED"
    assert body["queue_wait_seconds"] == 1.0 and body["run_seconds"] == 2.5
    assert body["picked"] and body["started"] and body["completed"] and body["failed"] is None
    rows = {
        row["id"]: row for row in root.get("outbox/?topic=billing&page_size=200").body["results"]
    }
    assert rows[str(picked.pk)]["run_status"] == "PICKED"
    assert rows[str(picked.pk)]["queue_wait_seconds"] == 2.0
    assert rows[str(picked.pk)]["run_seconds"] is None
    assert (
        rows[str(waiting.pk)]["run_status"] == "PENDING" and rows[str(waiting.pk)]["picked"] is None
    )
    deliveries = root.get(f"schedules/{done.aggregate_id}/deliveries/?page_size=200").body[
        "results"
    ]
    assert {row["id"]: row["run_status"] for row in deliveries}[str(done.pk)] == "SUCCEEDED"
