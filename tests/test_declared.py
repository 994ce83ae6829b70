from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dsched import api, declared
from django_dsched.checks.declared import check_declared_schedules
from django_dsched.enums import ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ConfigurationError
from django_dsched.models import Event, Schedule
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

NIGHTLY = {
    "cron": "0 2 * * *",
    "time_zone": "Europe/Brussels",
    "topic": "reports",
    "event_type": "report.build",
}
HEARTBEAT = {"every": 30, "unit": "SECONDS", "topic": "ops", "event_type": "ping"}


def test_new_declarations_are_created_once():
    report = declared.sync({"nightly": NIGHTLY, "heartbeat": HEARTBEAT})
    assert sorted(report.created) == ["heartbeat", "nightly"]
    again = declared.sync({"nightly": NIGHTLY, "heartbeat": HEARTBEAT})
    assert again.created == [] and sorted(again.unchanged) == ["heartbeat", "nightly"]
    assert Schedule.objects.filter(origin=ScheduleOrigin.CODE).count() == 2
    assert Event.objects.filter(event_type="dsched.schedule.created").count() == 2


def test_a_changed_declaration_updates_without_losing_its_place():
    declared.sync({"heartbeat": HEARTBEAT})
    sql("UPDATE schedule_t SET fire_count = 7")
    before = Schedule.objects.get()
    declared.sync({"heartbeat": {**HEARTBEAT, "topic": "ops2"}})
    after = Schedule.objects.get()
    assert after.event_topic == "ops2"
    assert (after.next_run_ts, after.fire_count) == (before.next_run_ts, 7)
    declared.sync({"heartbeat": {**HEARTBEAT, "every": 60}})
    moved = Schedule.objects.get()
    assert moved.frequency_time == 60
    assert (moved.next_slot_ts - moved.start_ts) % timedelta(seconds=60) == timedelta(0)


def test_removed_declarations_are_deactivated_and_come_back():
    declared.sync({"nightly": NIGHTLY, "heartbeat": HEARTBEAT})
    report = declared.sync({"nightly": NIGHTLY})
    assert report.deactivated == ["heartbeat"]
    heartbeat = Schedule.objects.get(schedule_name="heartbeat")
    assert (heartbeat.state, heartbeat.paused_reason) == (ScheduleState.PAUSED, declared.REMOVED)
    report = declared.sync({"nightly": NIGHTLY, "heartbeat": HEARTBEAT})
    assert report.reactivated == ["heartbeat"]
    assert Schedule.objects.get(schedule_name="heartbeat").state == ScheduleState.ACTIVE


def test_schedules_made_by_staff_are_left_alone():
    api.create_interval("heartbeat", every=5, topic="mine", event_type="mine")
    report = declared.sync({"heartbeat": HEARTBEAT})
    assert report.conflicts == ["heartbeat"]
    mine = Schedule.objects.get()
    assert (mine.event_topic, mine.origin) == ("mine", ScheduleOrigin.API)
    declared.sync({})
    assert Schedule.objects.get().state == ScheduleState.ACTIVE


def test_a_bad_declaration_is_refused_by_name_and_nothing_is_written():
    with pytest.raises(ValidationError, match="'broken'"):
        declared.sync({"ok": HEARTBEAT, "broken": {**NIGHTLY, "cron": "99 * * * *"}})
    assert not Schedule.objects.exists()
    with pytest.raises(ConfigurationError, match="unknown keys"):
        declared.declare("typo", evry=5, topic="t", event_type="x")


def test_settings_and_decorators_are_synced_by_the_command(settings):
    from django_dsched.handlers import registry

    settings.DSCHED_SCHEDULES = {"nightly": NIGHTLY}

    @declared.periodic("from-code", every=1, unit="HOURS", topic="code", event_type="code.tick")
    def handle(event):
        return event

    try:
        call_command("dsched", "sync", verbosity=0)
        assert set(Schedule.objects.values_list("schedule_name", "event_type")) == {
            ("nightly", "report.build"),
            ("from-code", "code.tick"),
        }
        # The decorated function is the in-process handler of its schedule's events.
        assert handle in registry.for_message("code", "code.tick")
    finally:
        declared._registry.pop("from-code", None)
        registry.unregister(handle, event_type="code.tick")


def test_migrate_syncs_on_deploy(settings):
    settings.DSCHED_SCHEDULES = {"nightly": NIGHTLY}
    call_command("migrate", verbosity=0)
    assert Schedule.objects.filter(schedule_name="nightly", origin=ScheduleOrigin.CODE).exists()


def test_check_names_a_bad_declaration_and_migrate_says_it_without_a_traceback(settings):
    """`check` warns of each declaration the sync would refuse (dsched.W006: a warning, so
    the scheduler and the relay still start), read without the database, and accepts what
    the sync accepts; `migrate`'s sync stops at a bad one with a command error."""
    settings.DSCHED_SCHEDULES = {
        "nightly": NIGHTLY,
        "weekdays": {**NIGHTLY, "cron": "0 2 * * MON-FRY"},
        "typo": {**HEARTBEAT, "evry": 5},
        "never": {**NIGHTLY, "cron": "0 2 31 2 *"},
        "singular": {**HEARTBEAT, "unit": "MINUTE"},
        "not-a-dict": ["every", 5],
        "no-cron": {**NIGHTLY, "cron": None},
        # What the sync accepts, the check accepts:
        "as-text": {"at": "2030-01-01T00:00:00+00:00", "topic": "t", "event_type": "x"},
        "on-time": {"at": datetime(2030, 1, 1, tzinfo=UTC), "topic": "t", "event_type": "x"},
        "no-end": {**HEARTBEAT, "end": None},
        "a-delta": {"every": timedelta(minutes=15), "topic": "t", "event_type": "x"},
        "lower-unit": {**HEARTBEAT, "unit": "hours"},
        "start-now": {**HEARTBEAT, "start": None},
    }
    with CaptureQueriesContext(connection) as queries:
        found = {warning.msg.split("'")[1]: warning for warning in check_declared_schedules()}
    assert len(queries) == 0  # a check runs before the commands wait for the database
    assert set(found) == {"weekdays", "typo", "never", "singular", "not-a-dict", "no-cron"}
    assert {warning.id for warning in found.values()} == {"dsched.W006"}
    assert "Invalid cron expression: 'MON-FRY'" in found["weekdays"].msg
    assert "unknown keys ['evry']" in found["typo"].msg
    assert "would never fire" in found["never"].msg
    assert "'MINUTE' is not one of SECONDS, MINUTES," in found["singular"].msg
    assert "must be a dict" in found["not-a-dict"].msg
    accepted = {name: settings.DSCHED_SCHEDULES[name] for name in
                ("as-text", "on-time", "no-end", "a-delta", "lower-unit", "start-now")}  # fmt: skip
    assert set(declared.sync(accepted).created) == set(accepted)

    settings.DSCHED_SCHEDULES = {"weekdays": {**NIGHTLY, "cron": "0 2 * * MON-FRY"}}
    with pytest.raises(CommandError, match=r"^declared schedule 'weekdays': Invalid cron"):
        declared.sync_after_migrate(None, using="default", verbosity=0)
    assert set(Schedule.objects.values_list("schedule_name", flat=True)) == set(accepted)


def test_check_reports_declarations_it_cannot_read(settings, monkeypatch):
    settings.DSCHED_SCHEDULES = [("nightly", NIGHTLY)]
    [warning] = check_declared_schedules()
    assert warning.msg == "DSCHED_SCHEDULES must be a dict of {name: declaration}."
    with pytest.raises(ValidationError, match="must be a dict of"):
        declared.sync()
    with pytest.raises(ValidationError, match="declared schedule 'listed': must be a dict"):
        declared.sync({"listed": ["every", 5]})

    def refused() -> None:
        raise ConfigurationError("schedule 'typo': unknown keys ['evry']")

    settings.DSCHED_SCHEDULES = {}
    monkeypatch.setattr(declared, "declarations", refused)
    [warning] = check_declared_schedules()
    assert warning.msg == "declared schedules: schedule 'typo': unknown keys ['evry']"


def test_a_declaration_takes_every_as_the_api_does():
    report = declared.sync(
        {
            "every-delta": {"every": timedelta(minutes=15), "topic": "t", "event_type": "x"},
            "lower-unit": {"every": 2, "unit": "hours", "topic": "t", "event_type": "x"},
        }
    )
    assert sorted(report.created) == ["every-delta", "lower-unit"]
    made = {s.schedule_name: (s.frequency_time, s.frequency_unit) for s in Schedule.objects.all()}
    assert made == {"every-delta": (15, "MINUTES"), "lower-unit": (2, "HOURS")}
