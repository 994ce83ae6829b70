from __future__ import annotations

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_dsched.enums import ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:dsched_schedule_changelist"


@pytest.fixture
def superuser_client(client):
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def staff_client(client, *perms):
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=perms)
    )
    client.force_login(user)
    return client


FORM_DEFAULTS = {
    "host_id": "00000000-0000-0000-0000-000000000000",
    "schedule_kind": "INTERVAL",
    "time_zone": "UTC",
    "jitter_seconds": "0",
    "priority": "0",
    "misfire_policy": "COALESCE",
    "catch_up_limit": "100",
    "event_data": "{}",
}


def form_data(**values):
    return {**FORM_DEFAULTS, **values}


def run_action(client, action, schedules):
    return client.post(
        reverse(CHANGELIST),
        {
            "action": action,
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(s.pk) for s in schedules],
        },
        follow=True,
    )


def test_changelist_shows_schedules(superuser_client):
    ScheduleFactory(schedule_name="nightly-report", frequency_time=15)
    response = superuser_client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    content = response.content.decode()
    assert "nightly-report" in content
    assert "every 15 minutes" in content
    response = superuser_client.get(reverse(CHANGELIST), {"q": "nightly", "state__exact": "ACTIVE"})
    assert "nightly-report" in response.content.decode()


def test_add_form_creates_a_valid_schedule(superuser_client):
    response = superuser_client.post(
        reverse("admin:dsched_schedule_add"),
        form_data(
            schedule_name="hourly",
            frequency_time="1",
            frequency_unit="HOURS",
            start_ts_0="2026-01-01",
            start_ts_1="00:00:00",
            event_topic="reports",
            event_type="report.build",
            event_data='{"a": 1}',
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule = Schedule.objects.get()
    assert schedule.event_data == {"a": 1}
    assert schedule.next_run_ts == schedule.start_ts


def test_add_form_shows_clear_errors_and_writes_nothing(superuser_client):
    response = superuser_client.post(
        reverse("admin:dsched_schedule_add"),
        form_data(
            schedule_name="bad",
            frequency_time="0",
            frequency_unit="HOURS",
            event_topic="bad topic",
            event_type="x",
            event_data="[1, 2]",
        ),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "greater than or equal to 1" in errors["frequency_time"][0]
    assert "letters, digits" in errors["event_topic"][0]
    assert "JSON object" in errors["event_data"][0]
    assert Schedule.objects.count() == 0


def test_change_form_saves_only_what_changed(superuser_client):
    schedule = ScheduleFactory(schedule_name="old")
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    response = superuser_client.get(url)
    assert response.status_code == 200
    data = form_data(
        schedule_name="new",
        frequency_time="1",
        frequency_unit="MINUTES",
        start_ts_0=schedule.start_ts.strftime("%Y-%m-%d"),
        start_ts_1=schedule.start_ts.strftime("%H:%M:%S.%f"),
        event_topic="reports",
        event_type="report.build",
        event_data='{"format": "pdf"}',
        seen_version=str(schedule.aggregate_version),
    )
    Schedule.objects.filter(pk=schedule.pk).update(fire_count=9)
    response = superuser_client.post(url, data)
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.schedule_name == "new"
    assert schedule.fire_count == 9


@pytest.mark.parametrize(
    ("action", "start", "end"),
    [
        ("pause_selected", ScheduleState.ACTIVE, ScheduleState.PAUSED),
        ("resume_selected", ScheduleState.PAUSED, ScheduleState.ACTIVE),
        ("cancel_selected", ScheduleState.ACTIVE, ScheduleState.CANCELLED),
    ],
)
def test_actions_change_state_and_report(superuser_client, action, start, end):
    schedules = ScheduleFactory.create_batch(2, state=start)
    skipped = ScheduleFactory(cancelled=True)
    response = run_action(superuser_client, action, [*schedules, skipped])
    messages = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("2 schedules") for m in messages), messages
    assert any("1 schedule was skipped" in m for m in messages), messages
    assert set(Schedule.objects.exclude(pk=skipped.pk).values_list("state", flat=True)) == {end}


def test_staff_without_permissions_see_no_actions(client):
    staff_client(client, "view_schedule")
    ScheduleFactory()
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    form = response.context["action_form"]
    names = {name for name, _ in form.fields["action"].choices} if form else set()
    assert not names & {"pause_selected", "resume_selected", "cancel_selected"}
    assert "Pause selected" not in response.content.decode()


def test_staff_with_pause_permission_can_pause_but_not_cancel(client):
    staff_client(client, "view_schedule", "change_schedule", "pause_schedule")
    schedule = ScheduleFactory()
    response = client.get(reverse(CHANGELIST))
    names = {name for name, _ in response.context["action_form"].fields["action"].choices}
    assert {"pause_selected", "resume_selected"} <= names
    assert "cancel_selected" not in names
    run_action(client, "cancel_selected", [schedule])
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.ACTIVE
    run_action(client, "pause_selected", [schedule])
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.PAUSED


@pytest.mark.parametrize("model", ["event", "outboxmessage", "lease"])
def test_history_is_read_only(superuser_client, model):
    response = superuser_client.get(reverse(f"admin:dsched_{model}_changelist"))
    assert response.status_code == 200
    assert superuser_client.get(reverse(f"admin:dsched_{model}_add")).status_code == 403


def test_event_and_outbox_pages_show_the_payload(superuser_client, db_now):
    from django.db import connection, transaction

    from django_dsched.cluster.lease import LeaseHolder
    from django_dsched.firing.batch import fire_batch
    from django_dsched.firing.fence import Fence

    ScheduleFactory(event_data={"marker": "<b>x</b>"})
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="t", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    with transaction.atomic(), connection.cursor() as cursor:
        fire_batch(cursor, Fence(1, "t", lease.epoch, 30), 10)
    event = Event.objects.get()
    for name, obj in (("event", event), ("outboxmessage", OutboxMessage.objects.get())):
        response = superuser_client.get(reverse(f"admin:dsched_{name}_change", args=[obj.pk]))
        assert response.status_code == 200
        content = response.content.decode()
        assert "&lt;b&gt;x&lt;/b&gt;" in content  # escaped, never rendered


def test_a_form_saved_over_a_newer_version_is_refused(superuser_client):
    schedule = ScheduleFactory(schedule_name="old")
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    data = form_data(
        schedule_name="mine",
        frequency_time="1",
        frequency_unit="MINUTES",
        start_ts_0=schedule.start_ts.strftime("%Y-%m-%d"),
        start_ts_1=schedule.start_ts.strftime("%H:%M:%S.%f"),
        event_topic="reports",
        event_type="report.build",
        seen_version=str(schedule.aggregate_version),
    )
    # The schedule fired (or was edited) after the form was opened.
    Schedule.objects.filter(pk=schedule.pk).update(aggregate_version=schedule.aggregate_version + 1)
    response = superuser_client.post(url, data)
    assert response.status_code == 200
    assert "changed since you opened it" in response.content.decode()
    assert Schedule.objects.get().schedule_name == "old"


def test_edits_leave_an_audit_event_with_who_and_what(superuser_client):
    from django_dsched.changes import edits

    schedule = edits.save_schedule(
        Schedule(
            schedule_name="audited",
            frequency_unit="MINUTES",
            frequency_time=5,
            event_topic="reports",
            event_type="report.build",
        ),
        actor="api-user",
    )
    run_action(superuser_client, "pause_selected", [schedule])
    history = list(
        Event.objects.filter(aggregate_id=schedule.pk)
        .order_by("aggregate_version")
        .values_list("aggregate_version", "event_type", "metadata__actor")
    )
    assert history == [
        (1, "dsched.schedule.created", "api-user"),
        (2, "dsched.schedule.paused", "root"),
    ]
