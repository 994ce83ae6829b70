"""Admin pages cost a fixed number of queries however many rows exist (no per-row query)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_dsched.changes import on_demand
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage, Schedule, SchedulerInstance
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

# Session, user, the page's own queries (the cluster page's: leases, instances, backlog,
# history days, the last hour's activity, the open circuits): anything above this is a leak.
MAX_QUERIES = 16


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def queries(client, url) -> int:
    client.get(url)  # warm the per-process caches (content types)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


def add_schedules(count: int) -> None:
    """``count`` schedules of every state, each fired twice, one delivery failed."""
    for n in range(count):
        schedule = ScheduleFactory(state=["ACTIVE", "PAUSED", "CANCELLED", "COMPLETED"][n % 4])
        if schedule.state in ("ACTIVE", "PAUSED"):
            on_demand.trigger(schedule)
            on_demand.trigger(schedule)
    OutboxMessage.objects.filter(aggregate_version=2).update(status=DeliveryStatus.DELIVERY_FAILED)


@pytest.mark.parametrize(
    "url",
    [
        "admin:dsched_schedule_changelist",
        "admin:dsched_event_changelist",
        "admin:dsched_outboxmessage_changelist",
        "admin:dsched_schedulerinstance_changelist",
    ],
)
def test_lists_cost_the_same_for_5_and_50_schedules(admin_client, url):
    add_schedules(5)
    few = queries(admin_client, reverse(url))
    add_schedules(45)
    many = queries(admin_client, reverse(url))
    assert many == few
    assert many <= MAX_QUERIES


def test_a_schedules_page_costs_the_same_with_5_and_50_events(admin_client):
    schedule = ScheduleFactory()
    for _ in range(5):
        on_demand.trigger(schedule)
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    few = queries(admin_client, url)
    for _ in range(45):
        on_demand.trigger(schedule)
    many = queries(admin_client, url)
    assert many == few
    assert many <= MAX_QUERIES


def test_the_cluster_page_costs_the_same_with_2_and_20_instances(admin_client):
    now = database_now()

    def add(names):
        SchedulerInstance.objects.bulk_create(
            SchedulerInstance(
                instance_id=name,
                role="standby",
                hostname="h",
                pid=1,
                started_ts=now,
                last_seen_ts=now - timedelta(seconds=1),
            )
            for name in names
        )

    add(["a", "b"])
    add_schedules(2)
    url = reverse("admin:dsched_schedulerinstance_changelist")
    few = queries(admin_client, url)
    add([f"i{n}" for n in range(18)])
    add_schedules(20)
    many = queries(admin_client, url)
    assert many == few
    assert many <= MAX_QUERIES


def test_an_action_on_many_schedules_stays_bounded_per_schedule(admin_client):
    from django.contrib.admin import helpers

    add_schedules(8)
    ids = list(Schedule.objects.filter(state="ACTIVE").values_list("pk", flat=True))
    with CaptureQueriesContext(connection) as captured:
        admin_client.post(
            reverse("admin:dsched_schedule_changelist"),
            {"action": "pause_selected", "post": "yes", helpers.ACTION_CHECKBOX_NAME: ids},
        )
    # The service saves each row and the admin logs each: a few queries per schedule.
    assert len(captured) <= 20 + 4 * len(ids)
