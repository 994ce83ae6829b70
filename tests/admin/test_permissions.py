"""Who may do what in the schedule admin (RELIABILITY S-01, S-02): every action, on the
selection and as a button, for a superuser and for staff with and without its permission.
A refused action changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.admin import helpers
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_dsched.enums import ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:dsched_schedule_changelist"
# action -> (the permission it needs, the state it starts from, the state it leads to)
ACTIONS = {
    "pause": ("pause_schedule", ScheduleState.ACTIVE, ScheduleState.PAUSED),
    "resume": ("pause_schedule", ScheduleState.PAUSED, ScheduleState.ACTIVE),
    "cancel": ("cancel_schedule", ScheduleState.ACTIVE, ScheduleState.CANCELLED),
    "run_now": ("trigger_schedule", ScheduleState.ACTIVE, ScheduleState.ACTIVE),
    "duplicate": ("add_schedule", ScheduleState.ACTIVE, ScheduleState.ACTIVE),
}
ALL_PERMS = {
    "view_schedule",
    "change_schedule",
    "add_schedule",
    "pause_schedule",
    "cancel_schedule",
    "trigger_schedule",
}
ROLES = ["superuser", "with_permission", "all_but_this_one", "view_only"]


def login(client: Client, role: str, needed: str) -> User:
    if role == "superuser":
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    else:
        perms = {
            "with_permission": {"view_schedule", needed},
            "all_but_this_one": ALL_PERMS - {needed},
            "view_only": {"view_schedule"},
        }[role]
        user = User.objects.create_user("staff", password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="dsched", codename__in=perms)
        )
    client.force_login(user)
    return user


def allowed(role: str) -> bool:
    return role in ("superuser", "with_permission")


def snapshot() -> tuple:
    """Everything an action could change."""
    return (
        sorted(Schedule.objects.values_list("schedule_name", "state", "aggregate_version")),
        Event.objects.count(),
        OutboxMessage.objects.count(),
        LogEntry.objects.count(),
    )


def post_action(client: Client, action: str, schedules: list[Schedule], **extra):
    return client.post(
        reverse(CHANGELIST),
        {
            "action": f"{action}_selected",
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(s.pk) for s in schedules],
            **extra,
        },
        follow=True,
    )


def button_url(schedule: Schedule, action: str) -> str:
    return reverse("admin:dsched_schedule_do", args=[schedule.pk, action])


def changed_as_expected(schedule: Schedule, action: str, before: tuple) -> bool:
    end = ACTIONS[action][2]
    schedule.refresh_from_db()
    if action == "run_now":
        return OutboxMessage.objects.filter(aggregate_id=schedule.pk).count() == 1
    if action == "duplicate":
        return Schedule.objects.filter(schedule_name=f"{schedule.schedule_name} (copy)").exists()
    return schedule.state == end and snapshot() != before


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_actions_and_buttons_are_offered_only_with_their_permission(client, action, role):
    needed, start, _ = ACTIONS[action]
    login(client, role, needed)
    schedule = ScheduleFactory(state=start)
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    form = response.context["action_form"]
    names = {name for name, _ in form.fields["action"].choices} if form else set()
    assert (f"{action}_selected" in names) is allowed(role)

    response = client.get(reverse("admin:dsched_schedule_change", args=[schedule.pk]))
    assert response.status_code == 200
    offered = {b["action"].name for b in response.context["dsched_buttons"]}
    assert (action in offered) is allowed(role)
    assert (button_url(schedule, action) in response.content.decode()) is allowed(role)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_an_action_on_the_selection_needs_its_permission(client, action, role):
    needed, start, _ = ACTIONS[action]
    login(client, role, needed)
    schedule = ScheduleFactory(state=start)
    before = snapshot()
    response = post_action(client, action, [schedule])
    assert response.status_code == 200
    if allowed(role):
        assert changed_as_expected(schedule, action, before)
    else:
        assert snapshot() == before


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_button_needs_its_permission(client, action, role):
    needed, start, _ = ACTIONS[action]
    login(client, role, needed)
    schedule = ScheduleFactory(state=start)
    before = snapshot()
    response = client.post(button_url(schedule, action), {"post": "yes"})
    if allowed(role):
        assert response.status_code == 302
        assert changed_as_expected(schedule, action, before)
    else:
        assert response.status_code == 403
        assert snapshot() == before


@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_get_never_changes_anything(client, action):
    login(client, "superuser", "")
    schedule = ScheduleFactory(state=ACTIONS[action][1])
    before = snapshot()
    response = client.get(button_url(schedule, action))
    if action in ("pause", "cancel", "run_now"):
        assert response.status_code == 200  # the confirmation page
        assert response.templates[0].name == "admin/dsched/schedule/action_confirmation.html"
    else:
        assert response.status_code == 405
    assert snapshot() == before


@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_forged_post_without_csrf_token_is_refused(action):
    client = Client(enforce_csrf_checks=True)
    login(client, "superuser", "")
    schedule = ScheduleFactory(state=ACTIONS[action][1])
    before = snapshot()
    assert client.post(button_url(schedule, action), {"post": "yes"}).status_code == 403
    response = client.post(
        reverse(CHANGELIST),
        {
            "action": f"{action}_selected",
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(schedule.pk)],
        },
    )
    assert response.status_code == 403
    assert snapshot() == before


@pytest.mark.parametrize("who", ["anonymous", "not_staff"])
def test_only_staff_reach_the_admin_pages(client, who):
    if who == "not_staff":
        client.force_login(User.objects.create_user("visitor", password="pw"))
    schedule = ScheduleFactory()
    before = snapshot()
    for url in (
        button_url(schedule, "cancel"),
        reverse("admin:dsched_schedulerinstance_changelist"),
        reverse("admin:dsched_schedule_change", args=[schedule.pk]),
    ):
        response = client.post(url, {"post": "yes"})
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
    assert snapshot() == before


def test_a_button_for_an_unknown_action_or_schedule_is_not_found(client):
    login(client, "superuser", "")
    schedule = ScheduleFactory()
    assert client.post(button_url(schedule, "delete")).status_code == 404
    missing = reverse(
        "admin:dsched_schedule_do", args=["00000000-0000-0000-0000-00000000abcd", "pause"]
    )
    response = client.post(missing, follow=True)
    assert any("doesn\u2019t exist" in str(m) for m in response.context["messages"])


def test_schedules_cannot_be_deleted_only_cancelled(client):
    login(client, "superuser", "")
    schedule = ScheduleFactory()
    response = client.get(reverse(CHANGELIST))
    names = {name for name, _ in response.context["action_form"].fields["action"].choices}
    assert "delete_selected" not in names
    url = reverse("admin:dsched_schedule_delete", args=[schedule.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Schedule.objects.filter(pk=schedule.pk).exists()


def test_staff_who_may_only_view_get_a_read_only_page(client):
    login(client, "view_only", "")
    schedule = ScheduleFactory(schedule_name="viewed")
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    response = client.get(url)
    assert response.status_code == 200
    assert 'name="_save"' not in response.content.decode()
    assert client.post(url, {"schedule_name": "changed"}).status_code == 403
    assert Schedule.objects.get().schedule_name == "viewed"


def add_form(start: datetime, **changes: str) -> dict[str, str]:
    local = timezone.localtime(start)
    return {
        "schedule_name": "backlog",
        "host_id": "00000000-0000-0000-0000-000000000000",
        "schedule_kind": "INTERVAL",
        "frequency_time": "1",
        "frequency_unit": "MINUTES",
        "start_ts_0": local.strftime("%Y-%m-%d"),
        "start_ts_1": local.strftime("%H:%M:%S"),
        "time_zone": "UTC",
        "jitter_seconds": "0",
        "priority": "0",
        "misfire_policy": "CATCH_UP",
        "catch_up_limit": "10000",
        "event_topic": "reports",
        "event_type": "report.build",
        "event_data": "{}",
        **changes,
    }


@pytest.mark.parametrize("role", ["superuser", "with_permission", "all_but_this_one"])
def test_adding_a_schedule_that_fires_a_backlog_needs_the_run_now_permission(client, role):
    """A new catch-up schedule whose start is a day ago would fire 1,440 slots at once:
    that is a run now (as an edit that makes a schedule due), refused without it."""
    user = login(client, role, "trigger_schedule")
    if role == "with_permission":
        user.user_permissions.add(Permission.objects.get(codename="add_schedule"))
    start = database_now() - timedelta(days=1)
    before = snapshot()
    response = client.post(reverse("admin:dsched_schedule_add"), add_form(start))
    if allowed(role):
        assert response.status_code == 302, response.content.decode()[:2000]
        assert Schedule.objects.filter(schedule_name="backlog").exists()
        return
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "dsched.trigger_schedule" in errors["misfire_policy"][0]
    assert snapshot() == before
    # The first slot only (COALESCE), or a start ahead: no backlog, no run-now permission.
    for changes in ({"misfire_policy": "COALESCE"}, {"schedule_name": "ahead"}):
        begin = start if "misfire_policy" in changes else database_now() + timedelta(hours=1)
        response = client.post(reverse("admin:dsched_schedule_add"), add_form(begin, **changes))
        assert response.status_code == 302, response.context["adminform"].form.errors


def test_duplicating_a_catch_up_schedule_needs_no_run_now_permission(client):
    """The copy is paused in the same transaction: it never fires unseen."""
    login(client, "with_permission", "add_schedule")
    source = ScheduleFactory(
        misfire_policy="CATCH_UP",
        catch_up_limit=10_000,
        start_ts=database_now() - timedelta(days=1),
    )
    post_action(client, "duplicate", [source])
    copy = Schedule.objects.exclude(pk=source.pk).get()
    assert copy.state == ScheduleState.PAUSED
