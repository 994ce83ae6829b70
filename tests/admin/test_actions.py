"""What each schedule action does: confirmation, the service it calls, its report, and
the admin history (LogEntry) it leaves."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched.enums import ScheduleOrigin, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:dsched_schedule_changelist"


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def select(client, action, schedules, **data):
    return client.post(
        reverse(CHANGELIST),
        {
            "action": action,
            "index": "0",
            helpers.ACTION_CHECKBOX_NAME: [str(s.pk) for s in schedules],
            **data,
        },
        follow=True,
    )


def messages_of(response):
    return [str(m) for m in response.context["messages"]]


def log(schedule, flag=CHANGE):
    return list(
        LogEntry.objects.filter(object_id=str(schedule.pk), action_flag=flag)
        .order_by("pk")
        .values_list("user__username", "change_message")
    )


@pytest.mark.parametrize("action", ["pause_selected", "cancel_selected", "run_now_selected"])
def test_destructive_actions_ask_first_and_change_nothing_until_confirmed(admin_client, action):
    schedules = [
        ScheduleFactory(schedule_name="alpha"),
        ScheduleFactory(schedule_name="<b>beta</b>"),
    ]
    response = select(admin_client, action, schedules)
    assert response.status_code == 200
    assert response.templates[0].name == "admin/dsched/schedule/action_confirmation.html"
    content = response.content.decode()
    assert "alpha" in content
    assert "&lt;b&gt;beta&lt;/b&gt;" in content  # escaped
    for schedule in schedules:  # the selection is carried to the confirming POST
        assert f'name="_selected_action" value="{schedule.pk}"' in content
    assert set(Schedule.objects.values_list("state", flat=True)) == {ScheduleState.ACTIVE}
    assert OutboxMessage.objects.count() == 0
    assert LogEntry.objects.count() == 0


def test_select_across_reaches_every_matching_schedule(admin_client):
    ScheduleFactory.create_batch(3, event_topic="billing")
    ScheduleFactory(event_topic="reports")
    response = admin_client.post(
        reverse(CHANGELIST) + "?event_topic=billing",
        {
            "action": "cancel_selected",
            "index": "0",
            "select_across": "1",
            helpers.ACTION_CHECKBOX_NAME: [str(Schedule.objects.first().pk)],
        },
    )
    assert 'name="select_across" value="1"' in response.content.decode()
    # The confirmation posts back to the filtered list: the three, not all four.
    response = admin_client.post(
        reverse(CHANGELIST) + "?event_topic=billing",
        {
            "action": "cancel_selected",
            "index": "0",
            "select_across": "1",
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(Schedule.objects.first().pk)],
        },
        follow=True,
    )
    assert "3 schedules cancelled." in messages_of(response)
    assert Schedule.objects.get(event_topic="reports").state == ScheduleState.ACTIVE


def test_pause_takes_a_reason_and_an_end(admin_client, db_now):
    schedule = ScheduleFactory()
    until = db_now() + timedelta(days=2)
    response = select(
        admin_client,
        "pause_selected",
        [schedule],
        post="yes",
        reason="quarter close",
        until=until.strftime("%Y-%m-%dT%H:%M"),
    )
    assert "1 schedule paused." in messages_of(response)
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.PAUSED
    assert schedule.paused_reason == "quarter close"
    assert schedule.paused_until == until.replace(second=0, microsecond=0)
    [(user, message)] = log(schedule)
    assert user == "root"
    assert message.startswith("Paused: quarter close Until ")


def test_a_pause_ending_in_the_past_is_refused_on_the_page(admin_client, db_now):
    schedule = ScheduleFactory()
    past = (db_now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    for response in (
        select(admin_client, "pause_selected", [schedule], post="yes", until=past),
        admin_client.post(
            reverse("admin:dsched_schedule_do", args=[schedule.pk, "pause"]), {"until": past}
        ),
    ):
        assert response.status_code == 200
        assert "The pause must end in the future." in response.content.decode()
        assert "Traceback" not in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.ACTIVE
    assert LogEntry.objects.count() == 0


@pytest.mark.parametrize(
    ("action", "start", "end", "note"),
    [
        ("pause_selected", ScheduleState.ACTIVE, ScheduleState.PAUSED, "Paused."),
        ("resume_selected", ScheduleState.PAUSED, ScheduleState.ACTIVE, "Resumed."),
        ("cancel_selected", ScheduleState.PAUSED, ScheduleState.CANCELLED, "Cancelled."),
    ],
)
def test_state_changes_report_counts_and_log_each_changed_schedule(
    admin_client, action, start, end, note
):
    changed = ScheduleFactory.create_batch(2, state=start)
    skipped = ScheduleFactory(state=ScheduleState.CANCELLED)
    response = select(admin_client, action, [*changed, skipped], post="yes")
    messages = messages_of(response)
    assert any(m.startswith("2 schedules") for m in messages), messages
    why = {
        "pause_selected": "is cancelled. Only active schedules can be paused.",
        "resume_selected": "is cancelled. Only paused or set aside schedules can be resumed.",
        "cancel_selected": "is already cancelled.",
    }[action]
    assert f"1 schedule was skipped: {skipped.schedule_name} {why}" in messages
    for schedule in changed:
        schedule.refresh_from_db()
        assert schedule.state == end
        assert log(schedule) == [("root", note)]
    assert log(skipped) == []
    # The service wrote the audit events, with the admin user as the actor.
    verbs = Event.objects.filter(aggregate_id__in=[s.pk for s in changed]).values_list(
        "event_type", "metadata__actor"
    )
    assert set(verbs) == {(f"dsched.schedule.{end_verb(end)}", "root")}


def end_verb(state):
    return {
        ScheduleState.PAUSED: "paused",
        ScheduleState.ACTIVE: "resumed",
        ScheduleState.CANCELLED: "cancelled",
    }[state]


def test_run_now_fires_once_through_the_exactly_once_path(admin_client):
    active = ScheduleFactory(schedule_name="active")
    paused = ScheduleFactory(schedule_name="paused", paused=True)
    cancelled = ScheduleFactory(schedule_name="cancelled", cancelled=True)
    response = select(admin_client, "run_now_selected", [active, paused, cancelled], post="yes")
    messages = messages_of(response)
    assert "2 schedules fired once now." in messages
    assert (
        "1 schedule was skipped: cancelled is cancelled. Only active or paused schedules can "
        "be run now." in messages
    )
    fires = Event.objects.filter(scheduled_ts__isnull=False)
    assert sorted(fires.values_list("metadata__schedule_name", "metadata__trigger")) == [
        ("active", "manual"),
        ("paused", "manual"),
    ]
    assert set(fires.values_list("metadata__actor", flat=True)) == {"root"}
    assert OutboxMessage.objects.filter(id__in=fires.values("id")).count() == 2
    assert log(active) == [("root", "Ran now: fired once.")]
    assert log(cancelled) == []
    paused.refresh_from_db()
    assert paused.state == ScheduleState.PAUSED  # running it did not resume it


def test_run_now_button_fires_and_shows_the_event(admin_client):
    schedule = ScheduleFactory()
    url = reverse("admin:dsched_schedule_do", args=[schedule.pk, "run_now"])
    response = admin_client.post(url, {"post": "yes"}, follow=True)
    assert "1 schedule fired once now." in messages_of(response)
    assert response.redirect_chain[-1][0] == reverse(
        "admin:dsched_schedule_change", args=[schedule.pk]
    )
    [row] = [r for r in response.context["dsched_events"].rows if r["obj"].scheduled_ts]
    assert row["obj"].metadata["trigger"] == "manual"
    assert "run now" in response.content.decode()


def test_duplicate_makes_paused_copies_with_new_names(admin_client):
    source = ScheduleFactory(
        schedule_name="nightly",
        schedule_kind="CRON",
        cron_expression="0 9 * * 1-5",
        time_zone="Europe/Brussels",
        event_data={"format": "pdf"},
        priority=5,
        origin=ScheduleOrigin.CODE,
    )
    select(admin_client, "duplicate_selected", [source])
    response = select(admin_client, "duplicate_selected", [source])
    assert "1 schedule duplicated, as a paused copy: nightly (copy 2)." in messages_of(response)
    copies = Schedule.objects.exclude(pk=source.pk).order_by("schedule_name")
    assert [c.schedule_name for c in copies] == ["nightly (copy 2)", "nightly (copy)"]
    for copy in copies:
        assert copy.state == ScheduleState.PAUSED
        assert copy.paused_reason == "Copy of nightly: review it, then resume it."
        assert copy.origin == ScheduleOrigin.ADMIN
        for name in ("cron_expression", "time_zone", "event_data", "priority", "event_topic"):
            assert getattr(copy, name) == getattr(source, name)
        assert log(copy, ADDITION) == [("root", "Duplicated from nightly.")]
        assert list(
            Event.objects.filter(aggregate_id=copy.pk)
            .order_by("aggregate_version")
            .values_list("event_type", "metadata__actor")
        ) == [("dsched.schedule.created", "root"), ("dsched.schedule.paused", "root")]


def test_duplicate_button_opens_the_copy(admin_client):
    source = ScheduleFactory(schedule_name="x" * 126)
    url = reverse("admin:dsched_schedule_do", args=[source.pk, "duplicate"])
    response = admin_client.post(url)
    copy = Schedule.objects.exclude(pk=source.pk).get()
    assert response["Location"] == reverse("admin:dsched_schedule_change", args=[copy.pk])
    assert len(copy.schedule_name) == 126
    assert copy.schedule_name.endswith(" (copy)")


def test_a_schedule_that_cannot_be_copied_is_reported(admin_client, settings):
    source = ScheduleFactory(schedule_name="ended", event_data={"blob": "x" * 200})
    # The limit shrank since it was made: a copy would be refused, so none is made.
    settings.DSCHED_EVENT_DATA_MAX_BYTES = 100
    response = select(admin_client, "duplicate_selected", [source])
    messages = messages_of(response)
    assert any(m.startswith("ended was not copied:") for m in messages), messages
    assert Schedule.objects.count() == 1


def test_buttons_follow_the_schedule_state(admin_client):
    def offered(schedule):
        url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
        return [b["action"].name for b in admin_client.get(url).context["dsched_buttons"]]

    assert offered(ScheduleFactory()) == ["pause", "run_now", "duplicate", "cancel"]
    assert offered(ScheduleFactory(paused=True)) == ["resume", "run_now", "duplicate", "cancel"]
    assert offered(ScheduleFactory(cancelled=True)) == ["duplicate"]


def test_a_skipped_cancel_names_each_schedules_state(admin_client):
    """Cancelling a completed one-shot said "its state does not allow it": it now says it
    is completed, as the command and the REST API do."""
    done = ScheduleFactory(schedule_name="reminder", state=ScheduleState.COMPLETED, active=False)
    response = select(admin_client, "cancel_selected", [done], post="yes")
    assert (
        "1 schedule was skipped: reminder is completed (it fired its last slot). Only active, "
        "paused or set aside schedules can be cancelled." in messages_of(response)
    )
    gone = ScheduleFactory(schedule_name="old", cancelled=True)
    response = select(admin_client, "cancel_selected", [done, gone], post="yes")
    assert (
        "2 schedules were skipped: old is cancelled; reminder is completed (it fired its last "
        "slot). Only active, paused or set aside schedules can be cancelled."
        in messages_of(response)
    )
