"""A schedule row the scheduler cannot plan is set aside with its error; the rest fires."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.changes import edits
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

# No tzdata has it (US/Pacific-New was removed from tzdata in 2020; this one never existed).
UNKNOWN_ZONE = "Mars/Olympus"


def due_cron(db_now, **kwargs):
    return ScheduleFactory(
        schedule_kind=ScheduleKind.CRON,
        cron_expression="* * * * *",
        time_zone="Europe/Brussels",
        start_ts=db_now() - timedelta(minutes=5),
        **kwargs,
    )


def poison(schedule, **columns):
    """Write values straight into the table, as a bad restore or a hand-written UPDATE."""
    assignments = ", ".join(f"{name} = %s" for name in columns)
    sql(
        f"UPDATE schedule_t SET {assignments} WHERE schedule_id = %s",
        [*columns.values(), schedule.schedule_id],
    )


def test_a_row_that_cannot_be_planned_is_set_aside_and_the_rest_fires(fence, db_now):
    healthy = [ScheduleFactory(start_ts=db_now() - timedelta(seconds=5)) for _ in range(3)]
    zone = due_cron(db_now)
    poison(zone, time_zone=UNKNOWN_ZONE)
    cron = due_cron(db_now)
    poison(cron, cron_expression="61 * * * *")

    result = fire(fence)

    assert (result.fenced, result.fired, result.set_aside) == (False, 3, 2)
    fires = Event.objects.filter(scheduled_ts__isnull=False)
    assert set(fires.values_list("aggregate_id", flat=True)) == {s.schedule_id for s in healthy}
    for schedule, fragment in ((zone, UNKNOWN_ZONE), (cron, "61 * * * *")):
        schedule.refresh_from_db()
        assert (schedule.state, schedule.active) == (ScheduleState.SET_ASIDE, False)
        assert fragment in schedule.set_aside_reason
        assert "CronError" in schedule.set_aside_reason
        assert schedule.set_aside_ts is not None
        assert schedule.aggregate_version == 2
        audit = Event.objects.get(aggregate_id=schedule.schedule_id)
        assert audit.event_type == "dsched.schedule.set_aside"
        assert audit.aggregate_version == 2
        assert fragment in audit.payload["error"]
        assert audit.payload["changes"] == {"state": ["ACTIVE", "SET_ASIDE"]}
        assert audit.metadata["actor"] == "scheduler"
        assert audit.leader_epoch == fence.epoch
    assert not OutboxMessage.objects.filter(aggregate_id__in=[zone.pk, cron.pk]).exists()
    # Out of the poll: the next batch finds nothing due.
    assert fire(fence).claimed == 0


def test_infinite_times_cannot_make_the_claim_fail(fence, db_now, unchecked):
    healthy = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    broken = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    with unchecked("schedule_t"):  # the database refuses them now (tests/firing/test_edge_values)
        poison(broken, start_ts="infinity", next_slot_ts="-infinity")
    result = fire(fence)
    assert (result.fired, result.set_aside) == (1, 1)
    assert Event.objects.get(scheduled_ts__isnull=False).aggregate_id == healthy.schedule_id
    (state, why) = sql(
        "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s",
        [broken.schedule_id],
    )[0]
    assert state == "SET_ASIDE"
    assert "start_ts and next_slot_ts hold times outside the years 1 to 9999" in why
    # Set aside with its times made storable; what it held is in the reason.
    assert "(start_ts held infinity, next_slot_ts held -infinity)" in why


def test_the_scheduler_keeps_running_past_a_poison_row(db_now):
    ScheduleFactory.create_batch(5, start_ts=db_now() - timedelta(seconds=5))
    poison(due_cron(db_now), time_zone=UNKNOWN_ZONE)
    scheduler = Scheduler(instance_id="survivor")
    assert scheduler.run_until_idle() == 5
    assert scheduler.stats.set_aside == 1
    assert scheduler.stats.db_errors == 0


def test_a_fenced_leader_sets_nothing_aside(fence, db_now):
    broken = due_cron(db_now)
    poison(broken, time_zone=UNKNOWN_ZONE)
    sql("UPDATE scheduler_lock_t SET epoch = epoch + 1, instance_id = 'other'")
    assert fire(fence).fenced
    broken.refresh_from_db()
    assert broken.state == ScheduleState.ACTIVE
    assert not Event.objects.exists()


def test_resume_takes_a_set_aside_schedule_back_once_it_can_be_planned(fence, db_now):
    broken = due_cron(db_now)
    poison(broken, time_zone=UNKNOWN_ZONE)
    fire(fence)
    # Still broken: resume leaves it set aside.
    assert api.resume(broken.schedule_id, actor="ops") is False
    broken.refresh_from_db()
    assert broken.state == ScheduleState.SET_ASIDE
    # Repaired behind the validators' back (tzdata installed, or fixed with SQL): resume.
    poison(broken, time_zone="Europe/Brussels")
    assert api.resume(broken.schedule_id, actor="ops") is True
    broken.refresh_from_db()
    assert (broken.state, broken.active) == (ScheduleState.ACTIVE, True)
    assert (broken.set_aside_reason, broken.set_aside_ts) == ("", None)
    assert broken.next_run_ts >= db_now() - timedelta(seconds=1)
    resumed = Event.objects.get(aggregate_id=broken.pk, event_type="dsched.schedule.resumed")
    assert resumed.payload["changes"] == {"state": ["SET_ASIDE", "ACTIVE"]}


def test_saving_a_valid_definition_takes_a_set_aside_schedule_back(fence, db_now):
    broken = due_cron(db_now)
    poison(broken, time_zone=UNKNOWN_ZONE)
    fire(fence)
    schedule = Schedule.objects.get(pk=broken.pk)
    schedule.time_zone = "Europe/Paris"
    edits.save_schedule(schedule, ["time_zone"], actor="ops")
    schedule.refresh_from_db()
    assert (schedule.state, schedule.active, schedule.set_aside_reason) == (
        ScheduleState.ACTIVE,
        True,
        "",
    )
    edited = Event.objects.get(aggregate_id=broken.pk, event_type="dsched.schedule.edited")
    assert edited.payload["changes"]["state"] == ["SET_ASIDE", "ACTIVE"]
    assert edited.payload["changes"]["time_zone"] == [UNKNOWN_ZONE, "Europe/Paris"]


def test_a_set_aside_schedule_can_be_cancelled(fence, db_now):
    broken = due_cron(db_now)
    poison(broken, time_zone=UNKNOWN_ZONE)
    fire(fence)
    assert api.cancel(broken.schedule_id) is True
    broken.refresh_from_db()
    assert broken.state == ScheduleState.CANCELLED


def test_status_and_the_command_show_the_error(fence, db_now, capsys):
    from django.core.management import call_command

    broken = due_cron(db_now, schedule_name="nightly")
    poison(broken, time_zone=UNKNOWN_ZONE)
    fire(fence)
    status = api.status("nightly")
    assert status.state == ScheduleState.SET_ASIDE
    assert UNKNOWN_ZONE in status.set_aside_reason
    assert status.set_aside_at is not None
    assert status.next_fire is None
    call_command("dsched", "list")
    listed = capsys.readouterr().out
    assert "SET_ASIDE" in listed and UNKNOWN_ZONE in listed
    call_command("dsched", "show", "nightly")
    assert f"unknown time zone '{UNKNOWN_ZONE}'" in capsys.readouterr().out
    call_command("dsched", "list", "--state", "SET_ASIDE")
    assert "nightly" in capsys.readouterr().out


def test_a_paused_poison_row_whose_pause_ends_is_set_aside_not_fatal(db_now):
    """The leader resumes schedules whose pause ended on each heartbeat: one that cannot be
    planned goes back to its old slot and is set aside by the fire path, with its error."""
    ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=5))
    paused = due_cron(db_now, paused=True)
    poison(paused, time_zone=UNKNOWN_ZONE, paused_until=db_now() - timedelta(seconds=1))
    scheduler = Scheduler(instance_id="janitor")
    try:
        scheduler._guarded(scheduler.step)  # leads, fires the healthy ones
        scheduler._next_heartbeat = 0  # the next round is a heartbeat: resume, then fire
        scheduler._guarded(scheduler.step)
        scheduler._guarded(scheduler.step)
    finally:
        scheduler.shutdown()
    paused.refresh_from_db()
    assert paused.state == ScheduleState.SET_ASIDE
    assert UNKNOWN_ZONE in paused.set_aside_reason
    assert scheduler.stats.db_errors == 0
    history = list(
        Event.objects.filter(aggregate_id=paused.pk)
        .order_by("aggregate_version")
        .values_list("event_type", flat=True)
    )
    assert history == ["dsched.schedule.resumed", "dsched.schedule.set_aside"]
