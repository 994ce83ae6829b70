from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_dsched import api
from django_dsched.enums import ScheduleState
from django_dsched.models import OutboxMessage, Schedule

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
    assert "state    ACTIVE" in shown and str(nightly.schedule_id) in shown
    assert "run      None" in shown  # nothing fired yet


def test_show_gives_the_newest_runs_status(nightly):
    api.trigger("nightly")

    assert "run      PENDING" in run("show", "nightly")


def test_preview(nightly):
    lines = run("preview", "nightly", "-n", "3").split()
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
        (["resume", "nightly"], "not paused"),
        (["backfill", "nightly", "--start", "2026-01-01T00:00:00+00:00", "--end", "x"], "ISO"),
    ],
)
def test_bad_input_gets_a_clear_error(nightly, args, fragment):
    with pytest.raises(CommandError, match=fragment):
        run(*args)
