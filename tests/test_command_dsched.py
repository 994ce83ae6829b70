from __future__ import annotations

import re
from datetime import UTC, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F

from django_dsched import api
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command("dsched", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def nightly():
    return api.create_cron(
        "nightly", cron="0 2 * * 1-5", time_zone="Europe/Brussels", topic="t", event_type="x"
    )


def test_list_and_show(nightly):
    assert "nightly" in run("list")
    assert "At 02:00, Monday through Friday (Europe/Brussels)" in run("list")
    shown = run("show", "nightly")
    assert "state      ACTIVE" in shown and str(nightly.schedule_id) in shown
    assert "run        -" in shown  # nothing fired yet
    assert "last error -" in shown


def test_show_gives_the_newest_runs_status(nightly):
    api.trigger("nightly")

    assert "run        PENDING" in run("show", "nightly")


def completed_one_shot(db_now):
    api.create_once("reminder", at=db_now() - timedelta(hours=1), topic="t", event_type="x")
    Schedule.objects.filter(schedule_name="reminder").update(
        state=ScheduleState.COMPLETED, active=False
    )


def test_list_shows_the_state_of_a_schedule_that_will_not_fire_next(nightly, db_now):
    completed_one_shot(db_now)
    until = db_now() + timedelta(days=2)
    api.create_interval("held", every=1, topic="t", event_type="x")
    api.pause("held", until=until)
    api.create_interval("stopped", every=1, topic="t", event_type="x")
    api.pause("stopped")
    lines = {line.split()[0]: line for line in run("list").splitlines()}
    assert " next 20" in lines["nightly"]
    assert "COMPLETED completed " in lines["reminder"] and "next" not in lines["reminder"]
    assert f"paused until {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" in lines["held"]
    assert "paused until resumed" in lines["stopped"]
    assert "next" not in lines["held"] + lines["stopped"]


def test_show_gives_the_newest_deliverys_error(nightly):
    api.trigger("nightly")
    OutboxMessage.objects.update(last_error="ConnectionRefusedError: relay-1 -> hooks")

    assert "last error ConnectionRefusedError: relay-1 -> hooks" in run("show", "nightly")


def test_cancelling_a_completed_one_shot_says_it_is_completed(db_now):
    completed_one_shot(db_now)
    with pytest.raises(CommandError) as refused:
        run("cancel", "reminder")
    assert str(refused.value) == (
        "reminder is completed (it fired its last slot). Only active, paused or set aside "
        "schedules can be cancelled. Nothing done."
    )
    assert "next" not in run("show", "reminder").split("next", 1)[1].splitlines()[0]


def test_pausing_or_resuming_in_the_wrong_state_names_the_state(nightly):
    with pytest.raises(CommandError, match=re.escape("nightly is already active. Nothing done.")):
        run("resume", "nightly")
    api.pause("nightly")
    with pytest.raises(CommandError, match=re.escape("nightly is already paused. Nothing done.")):
        run("pause", "nightly")
    api.cancel("nightly")
    with pytest.raises(
        CommandError, match=re.escape("nightly is cancelled. Only paused or set aside")
    ):
        run("resume", "nightly")


def test_a_backfill_without_a_slot_says_why(nightly, db_now):
    """The range ends before the schedule starts: nothing fired, and the answer says why."""
    start = nightly.start_ts - timedelta(days=3)
    end = nightly.start_ts - timedelta(days=1)
    out = run("backfill", "nightly", "--start", start.isoformat(), "--end", end.isoformat())
    assert out.startswith("Fired nothing: No slot of this schedule falls between ")
    assert f"; it starts at {nightly.start_ts:%Y-%m-%d %H:%M:%S} UTC." in out
    assert not OutboxMessage.objects.exists()


def test_preview(nightly):
    lines = run("preview", "nightly", "-n", "3").splitlines()
    assert len(lines) == 3


def test_pause_resume_cancel_trigger(nightly, db_now):
    until = (db_now() + timedelta(hours=2)).isoformat()
    assert "Paused" in run("pause", "nightly", "--reason", "audit", "--until", until)
    assert Schedule.objects.get().paused_reason == "audit"
    assert "Resumed" in run("resume", "nightly")
    assert "Fired nightly once." in run("trigger", "nightly")
    assert OutboxMessage.objects.count() == 1
    assert "Cancelled" in run("cancel", "nightly")
    assert Schedule.objects.get().state == ScheduleState.CANCELLED


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["show", "nope"], "No schedule 'nope'"),
        (["pause", "nightly", "--until", "2030-01-01T00:00:00"], "no offset"),
        (["resume", "nightly"], "nightly is already active"),
        (["backfill", "nightly", "--start", "2026-01-01T00:00:00+00:00", "--end", "x"], "ISO"),
    ],
)
def test_bad_input_gets_a_clear_error(nightly, args, fragment):
    with pytest.raises(CommandError, match=fragment):
        run(*args)


def user(name: str, *codenames: str):
    from django.contrib.auth.models import Permission, User

    made = User.objects.create_user(name, password="pw")
    made.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=codenames)
    )
    return made


@pytest.fixture
def behind(db_now):
    """A paused catch-up schedule that missed a minute of slots."""
    start = db_now() - timedelta(minutes=10)
    api.create_interval(
        "behind",
        every=1,
        unit="MINUTES",
        start=start,
        misfire_policy="CATCH_UP",
        topic="t",
        event_type="x",
    )
    api.pause("behind")
    return Schedule.objects.get(schedule_name="behind")


def test_as_a_user_each_action_needs_its_permission(nightly, behind):
    """--user: the user's permissions, as in the admin and the REST API; refused with a
    clear message and nothing done, else done with the user as the audit actor."""
    user("pauser", "pause_schedule", "view_schedule")
    with pytest.raises(CommandError, match=r"run schedules now \(dsched\.trigger_schedule\)"):
        run("--user", "pauser", "resume", "behind", "--catch-up")
    with pytest.raises(CommandError, match=r"dsched\.trigger_schedule"):
        run("--user", "pauser", "trigger", "nightly")
    with pytest.raises(CommandError, match=r"dsched\.trigger_schedule"):
        run(
            "--user",
            "pauser",
            "backfill",
            "nightly",
            "--start",
            "2026-01-01T00:00:00+00:00",
            "--end",
            "2026-01-02T00:00:00+00:00",
        )
    with pytest.raises(CommandError, match=r"dsched\.cancel_schedule"):
        run("--user", "pauser", "cancel", "nightly")
    assert Schedule.objects.get(pk=behind.pk).state == ScheduleState.PAUSED
    assert OutboxMessage.objects.count() == 0
    assert "Paused nightly." in run("--user", "pauser", "pause", "nightly")
    assert "Resumed behind." in run("--user", "pauser", "resume", "behind")  # from now
    assert "nightly" in run("--user", "pauser", "list")
    assert api.get("nightly").aggregate_version == 2
    paused = Event.objects.filter(aggregate_id=nightly.pk).order_by("aggregate_version").last()
    assert paused.metadata["actor"] == "pauser"

    user("nobody")
    for args in (["list"], ["show", "nightly"], ["preview", "nightly"], ["cluster"]):
        with pytest.raises(CommandError, match="needs the permission"):
            run("--user", "nobody", *args)


def test_as_a_user_who_may_fire_a_catch_up_resume_is_done(behind, db_now):
    user("operator", "pause_schedule", "trigger_schedule")
    assert "Resumed behind." in run("--user", "operator", "resume", "behind", "--catch-up")
    assert Schedule.objects.get(pk=behind.pk).next_run_ts < db_now()  # the backlog is due


def test_without_user_the_operator_may_do_everything_and_deployment_actions_need_no_user(behind):
    assert "Resumed behind." in run("resume", "behind", "--catch-up")
    with pytest.raises(CommandError, match="run it without --user"):
        run("--user", "someone", "sync")
    with pytest.raises(CommandError, match="No user 'ghost'"):
        run("--user", "ghost", "list")


def test_show_has_no_last_error_once_a_retry_delivered(nightly):
    """A retry that succeeded keeps the failed attempt's text on the message (its history);
    `last error` is why the newest fire's message failed: "-" once it is delivered."""
    api.trigger("nightly")
    OutboxMessage.objects.update(
        status=DeliveryStatus.PENDING, attempts=1, last_error="AddressRefused: refused ::1"
    )
    assert "last error AddressRefused: refused ::1" in run("show", "nightly")
    OutboxMessage.objects.update(
        status=DeliveryStatus.DELIVERED, attempts=2, delivered_ts=F("event_ts")
    )
    shown = run("show", "nightly")
    assert "delivery   DELIVERED" in shown
    assert "last error -" in shown
    assert api.status("nightly").last_error == ""
