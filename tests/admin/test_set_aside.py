"""A set-aside schedule in the admin: the state and the scheduler's error in the list and on
its page; fixing the definition or resuming takes it back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.urls import reverse

from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.models import Schedule
from tests.admin.test_admin import form_data, run_action
from tests.admin.test_pages import admin_client, change_url  # noqa: F401 (fixture)
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db

UNKNOWN_ZONE = "Mars/Olympus"


@pytest.fixture
def set_aside(db_now):
    """A cron schedule whose stored zone this host does not know, set aside by a fire."""
    schedule = ScheduleFactory(
        schedule_name="broken-zone",
        schedule_kind=ScheduleKind.CRON,
        cron_expression="*/5 * * * *",
        time_zone="Europe/Brussels",
        start_ts=db_now() - timedelta(hours=1),
    )
    sql("UPDATE schedule_t SET time_zone = %s WHERE schedule_id = %s", [UNKNOWN_ZONE, schedule.pk])
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="test", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    with transaction.atomic(), connection.cursor() as cursor:
        assert fire_batch(cursor, Fence(1, "test", lease.epoch, 30.0), 10).set_aside == 1
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.SET_ASIDE
    return schedule


def test_the_list_shows_the_state_and_the_error(admin_client, set_aside):  # noqa: F811
    response = admin_client.get(reverse("admin:dsched_schedule_changelist"))
    content = response.content.decode()
    assert "set aside" in content
    assert f"unknown time zone &#x27;{UNKNOWN_ZONE}&#x27;" in content
    filtered = admin_client.get(
        reverse("admin:dsched_schedule_changelist"), {"state__exact": "SET_ASIDE"}
    )
    assert "broken-zone" in filtered.content.decode()


def test_the_page_shows_the_error_and_offers_resume_and_cancel(admin_client, set_aside):  # noqa: F811
    response = admin_client.get(change_url(set_aside))
    assert response.status_code == 200
    content = response.content.decode()
    assert "The scheduler set this schedule aside" in content
    assert f"unknown time zone &#x27;{UNKNOWN_ZONE}&#x27;" in content
    names = {button["action"].name for button in response.context["dsched_buttons"]}
    assert {"resume", "cancel"} <= names
    assert "run_now" not in names and "pause" not in names


def test_saving_a_valid_zone_takes_it_back(admin_client, set_aside):  # noqa: F811
    data = form_data(
        schedule_name="broken-zone",
        schedule_kind="CRON",
        cron_expression="*/5 * * * *",
        time_zone="Europe/Brussels",
        start_ts_0=set_aside.start_ts.strftime("%Y-%m-%d"),
        start_ts_1=set_aside.start_ts.strftime("%H:%M:%S"),
        event_topic=set_aside.event_topic,
        event_type=set_aside.event_type,
        event_data='{"format": "pdf"}',
        seen_version=str(set_aside.aggregate_version),
    )
    response = admin_client.post(change_url(set_aside), data)
    assert response.status_code == 302, response.content.decode()
    schedule = Schedule.objects.get(pk=set_aside.pk)
    assert (schedule.state, schedule.active, schedule.set_aside_reason) == (
        ScheduleState.ACTIVE,
        True,
        "",
    )


def test_resume_leaves_it_aside_while_it_still_cannot_be_planned(admin_client, set_aside):  # noqa: F811
    response = run_action(admin_client, "resume_selected", [set_aside])
    assert "skipped" in response.content.decode()
    assert Schedule.objects.get(pk=set_aside.pk).state == ScheduleState.SET_ASIDE
    sql("UPDATE schedule_t SET time_zone = 'UTC' WHERE schedule_id = %s", [set_aside.pk])
    run_action(admin_client, "resume_selected", [set_aside])
    assert Schedule.objects.get(pk=set_aside.pk).state == ScheduleState.ACTIVE
