"""The cluster page: leader, epoch and heartbeat age, recent instances, backlog, fire
rates, oldest undelivered message; reached from the admin index."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from django_dsched.changes import on_demand, pauses
from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Circuit, Lease, OutboxMessage, SchedulerInstance
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

CLUSTER = "admin:dsched_schedulerinstance_changelist"


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def instance(name, role="standby", seen_ago=1.0, epoch=None):
    now = database_now()
    return SchedulerInstance.objects.create(
        instance_id=name,
        role=role,
        hostname=f"{name}.internal",
        pid=1000 + len(name),
        epoch=epoch,
        started_ts=now - timedelta(minutes=30),
        last_seen_ts=now - timedelta(seconds=seen_ago),
    )


def test_the_index_links_to_the_cluster_page(admin_client):
    content = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{reverse(CLUSTER)}"' in content
    content = admin_client.get(reverse("admin:dsched_schedule_changelist")).content.decode()
    assert f'href="{reverse(CLUSTER)}"' in content


def test_the_page_shows_leader_instances_backlog_rates_and_outbox(admin_client):
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="sched-a", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    instance("sched-a", role="leader", epoch=lease.epoch)
    instance("sched-b", seen_ago=2)
    instance("sched-gone", seen_ago=3600)  # not seen recently: not listed
    due = ScheduleFactory(start_ts=database_now() - timedelta(minutes=5))
    ScheduleFactory.create_batch(2, start_ts=database_now() - timedelta(seconds=30))
    ScheduleFactory(start_ts=database_now() + timedelta(hours=1))  # not due
    on_demand.trigger(due)
    on_demand.trigger(due)
    OutboxMessage.objects.filter(aggregate_version=3).update(status=DeliveryStatus.DELIVERY_FAILED)

    response = admin_client.get(reverse(CLUSTER))
    assert response.status_code == 200
    status = response.context["status"]
    assert status.leader.instance_id == "sched-a"
    assert status.leader.epoch == lease.epoch
    assert status.leader.live
    assert 0 <= status.leader.heartbeat_seconds < 30
    assert [i.row.instance_id for i in status.instances] == ["sched-a", "sched-b"]
    assert status.due == 3
    assert status.oldest_due == due.next_run_ts
    assert (status.fires_minute, status.fires_hour) == (2, 2)
    assert status.pending == 1
    assert status.dead_letters == 1
    assert status.oldest_pending.aggregate_id == due.pk
    content = response.content.decode()
    for text in ("sched-a", "leading", "sched-b.internal", "Heartbeat age", "Dead letters"):
        assert text in content
    assert "sched-gone" not in content


def test_fires_older_than_an_hour_and_changes_do_not_count(admin_client):
    schedule = ScheduleFactory()
    on_demand.trigger(schedule)
    pauses.pause(type(schedule).objects.all())  # a change, not a fire
    from django_dsched.models import Event

    Event.objects.filter(scheduled_ts__isnull=False).update(
        event_ts=database_now() - timedelta(minutes=90)
    )
    status = admin_client.get(reverse(CLUSTER)).context["status"]
    assert (status.fires_minute, status.fires_hour) == (0, 0)


@pytest.mark.parametrize("how", ["expired", "released", "never"])
def test_no_live_leader_is_said_plainly(admin_client, how):
    if how != "never":
        beat = (
            "1970-01-01T00:00:00Z" if how == "released" else database_now() - timedelta(minutes=5)
        )
        Lease.objects.create(lease_id=1, instance_id="old", epoch=7, last_heartbeat=beat)
    instance("lagging", seen_ago=20)  # still recent, but it missed its reports
    response = admin_client.get(reverse(CLUSTER))
    content = response.content.decode()
    assert "no leader" in content
    assert response.context["status"].instances[0].stale
    assert "stale" in content
    if how == "released":
        assert "released" in content
    if how == "never":
        assert "No scheduler has ever taken the lease" in content


def test_the_page_needs_the_view_permission(client):
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(reverse(CLUSTER)).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_schedulerinstance"))
    assert client.get(reverse(CLUSTER)).status_code == 200


def test_instances_are_never_edited_here(admin_client):
    instance("sched-a")
    assert admin_client.get(reverse("admin:dsched_schedulerinstance_add")).status_code == 403
    url = reverse("admin:dsched_schedulerinstance_delete", args=["sched-a"])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert SchedulerInstance.objects.count() == 1


def test_destinations_relays_hold_back_are_listed_on_the_page_and_by_dsched(admin_client):
    now = database_now()
    Circuit.objects.create(
        relay_id="relay-7",
        route="DSCHED_TRANSPORTS['partner']",
        host="00000000-0000-0000-0000-00000000000a",
        transport="webhook",
        state="open",
        failures=5,
        last_error="DeliveryError: timed out after 10.0s",
        opened_ts=now - timedelta(seconds=20),
        until_ts=now + timedelta(seconds=40),
    )
    page = admin_client.get(reverse(CLUSTER)).content.decode()
    assert 'id="dsched-circuits"' in page
    assert "DSCHED_TRANSPORTS[&#x27;partner&#x27;]" in page and "relay-7" in page
    assert "timed out after 10.0s" in page
    out = StringIO()
    call_command("dsched", "cluster", stdout=out)
    text = out.getvalue()
    assert "open circuits: 1" in text
    assert "DSCHED_TRANSPORTS['partner'] host 00000000-0000-0000-0000-00000000000a" in text
    assert "relay relay-7: open, 5 failure(s) in a row, held back" in text
