"""Edits of a schedule's timing (issue 8, items 5 and 10).

* An edit in the admin under a non-UTC ``TIME_ZONE`` places the next slot on the same grid
  the fire path uses (it used to step the user's wall clock and fire twice in an hour).
* An edit that would end a schedule at once needs the cancel permission, one that would
  fire it at once the run-now permission; both are refused otherwise, naming the field.
* An edit never drops a due slot without recording a misfire, and never drops a slot whose
  jittered run time is still ahead.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from django_dsched import api
from django_dsched.changes import edits
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.exceptions import EditNotPermitted
from django_dsched.models import Event, Schedule
from django_dsched.timetables import jitter
from django_dsched.timetables.grid import to_microseconds
from tests.factories import ScheduleFactory
from tests.fire_path import run_fire_path
from tests.helpers import sql

pytestmark = pytest.mark.django_db

BASE = {
    "host_id": "00000000-0000-0000-0000-000000000000",
    "time_zone": "UTC",
    "jitter_seconds": "0",
    "priority": "0",
    "misfire_policy": "COALESCE",
    "catch_up_limit": "100",
    "event_topic": "reports",
    "event_type": "report.build",
    "event_data": "{}",
}


def login(client: Client, *perms: str) -> Client:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=perms)
    )
    client.force_login(user)
    return client


def local(when: datetime, field: str, zone: str = "UTC") -> dict[str, str]:
    """A time as the admin's split widget posts it: on the wall clock of the schedule's
    zone (the form's time_zone), whatever Django's current zone."""
    there = when.astimezone(ZoneInfo(zone))
    return {f"{field}_0": there.strftime("%Y-%m-%d"), f"{field}_1": there.strftime("%H:%M:%S.%f")}


def form(schedule: Schedule, **changes: str) -> dict[str, str]:
    data = {
        **BASE,
        "schedule_name": schedule.schedule_name,
        "schedule_kind": schedule.schedule_kind,
        "frequency_time": str(schedule.frequency_time or ""),
        "frequency_unit": schedule.frequency_unit,
        "time_zone": schedule.time_zone,
        "jitter_seconds": str(schedule.jitter_seconds),
        "seen_version": str(schedule.aggregate_version),
    }
    zone = changes.get("time_zone", schedule.time_zone)
    data.update(local(schedule.start_ts, "start_ts", zone))
    if schedule.end_ts is not None:
        data.update(local(schedule.end_ts, "end_ts", zone))
    if schedule.max_fires is not None:
        data["max_fires"] = str(schedule.max_fires)
    data.update(changes)
    return data


def edit(client: Client, schedule: Schedule, **changes: str):
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    return client.post(url, form(schedule, **changes))


def errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.status_code
    return response.context["adminform"].form.errors


# -- item 5 --------------------------------------------------------------------------------
def other_offset_anchor(now: datetime, zone: ZoneInfo) -> datetime:
    """09:00 local on a day whose UTC offset differs from today's (a DST change between)."""
    for days in range(100, 400):
        day = (now - timedelta(days=days)).astimezone(zone)
        anchor = day.replace(hour=9, minute=0, second=0, microsecond=0)
        if anchor.utcoffset() != now.astimezone(zone).utcoffset():
            return anchor
    raise AssertionError("no DST change in a year")


@override_settings(TIME_ZONE="Australia/Sydney")
def test_an_admin_edit_in_sydney_keeps_the_utc_grid_and_fires_once_a_day(client, db_now):
    sydney = ZoneInfo("Australia/Sydney")
    anchor = other_offset_anchor(db_now(), sydney)
    schedule = api.create_interval(
        "daily", every=1, unit="DAYS", start=anchor, topic="reports", event_type="report.build"
    )
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = edit(client, schedule, jitter_seconds="1")
    assert response.status_code == 302, errors(response)
    schedule.refresh_from_db()
    # The schedule's zone is UTC: its grid is 24-hour days from the anchor.
    assert (schedule.next_slot_ts - anchor) % timedelta(days=1) == timedelta(0)
    assert timedelta(0) <= schedule.next_run_ts - schedule.next_slot_ts < timedelta(seconds=1)
    # The fire path goes on a day later each time: never twice within an hour.
    run = run_fire_path(schedule, polls=3)
    assert [b - a for a, b in zip(run.fired_slots, run.fired_slots[1:], strict=False)] == [
        timedelta(days=1)
    ] * 2
    assert run.fired_at == schedule.upcoming(3)


@override_settings(TIME_ZONE="Australia/Sydney")
def test_a_schedule_in_sydneys_zone_fires_at_nine_there_all_year(client, db_now):
    sydney = ZoneInfo("Australia/Sydney")
    anchor = other_offset_anchor(db_now(), sydney)
    schedule = api.create_interval(
        "daily", every=1, unit="DAYS", start=anchor, topic="reports", event_type="report.build"
    )
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = edit(client, schedule, time_zone="Australia/Sydney")
    assert response.status_code == 302, errors(response)
    schedule.refresh_from_db()
    run = run_fire_path(schedule, polls=400)
    assert {slot.astimezone(sydney).time() for slot in run.fired_slots} == {anchor.time()}
    assert run.fired_at == schedule.upcoming(400)
    assert "every day (Australia/Sydney)" in client.get(
        reverse("admin:dsched_schedule_changelist")
    ).content.decode().replace("<wbr>", "")


# -- item 10: permissions ---------------------------------------------------------------------
def snapshot(schedule: Schedule) -> tuple:
    row = Schedule.objects.filter(pk=schedule.pk).values_list(
        "state", "end_ts", "max_fires", "start_ts", "next_run_ts", "aggregate_version"
    )[0]
    return (*row, Event.objects.filter(aggregate_id=schedule.pk).count())


def minutely(db_now) -> Schedule:
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(hours=1))
    schedule.place(db_now())
    schedule.save()
    return schedule


def test_ending_a_schedule_by_its_end_needs_the_cancel_permission(client, db_now):
    schedule = minutely(db_now)
    before = snapshot(schedule)
    login(client, "view_schedule", "change_schedule")
    response = edit(client, schedule, **local(schedule.start_ts + timedelta(seconds=1), "end_ts"))
    assert "permission to cancel" in " ".join(errors(response)["end_ts"])
    assert snapshot(schedule) == before


def test_with_the_cancel_permission_the_edit_ends_it_at_once(client, db_now):
    schedule = minutely(db_now)
    login(client, "view_schedule", "change_schedule", "cancel_schedule")
    response = edit(client, schedule, **local(schedule.start_ts + timedelta(seconds=1), "end_ts"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.state, schedule.active) == (ScheduleState.COMPLETED, False)
    edited = Event.objects.get(aggregate_id=schedule.pk, event_type="dsched.schedule.edited")
    assert edited.payload["changes"]["state"] == ["ACTIVE", "COMPLETED"]


def test_a_fire_limit_already_reached_needs_the_cancel_permission(client, db_now):
    schedule = minutely(db_now)
    Schedule.objects.filter(pk=schedule.pk).update(fire_count=7)
    schedule.refresh_from_db()
    login(client, "view_schedule", "change_schedule")
    response = edit(client, schedule, max_fires="7")
    assert "permission to cancel" in " ".join(errors(response)["max_fires"])
    assert Schedule.objects.get(pk=schedule.pk).state == ScheduleState.ACTIVE


def test_moving_a_one_shot_into_the_past_needs_the_run_now_permission(client, db_now):
    schedule = api.create_once(
        "later", at=db_now() + timedelta(days=1), topic="reports", event_type="report.build"
    )
    before = snapshot(schedule)
    login(client, "view_schedule", "change_schedule")
    moved = local(db_now() - timedelta(minutes=1), "start_ts")
    response = edit(client, schedule, **moved)
    assert "permission to run schedules now" in " ".join(errors(response)["start_ts"])
    assert snapshot(schedule) == before
    # With it, the same edit goes through, and the schedule is due at once.
    client.logout()
    User.objects.all().delete()
    login(client, "view_schedule", "change_schedule", "trigger_schedule")
    assert edit(client, schedule, **moved).status_code == 302
    assert Schedule.objects.due().filter(pk=schedule.pk).exists()


def test_editing_a_start_in_the_future_needs_only_change(client, db_now):
    schedule = api.create_once(
        "later", at=db_now() + timedelta(days=1), topic="reports", event_type="report.build"
    )
    login(client, "view_schedule", "change_schedule")
    response = edit(client, schedule, **local(db_now() + timedelta(hours=2), "start_ts"))
    assert response.status_code == 302


def test_services_refuse_for_callers_without_the_permission_and_code_is_trusted(db_now):
    schedule = minutely(db_now)
    schedule.end_ts = schedule.start_ts + timedelta(seconds=1)
    with pytest.raises(EditNotPermitted) as refused:
        edits.save_schedule(schedule, ["end_ts"], may_complete=False)
    assert "end_ts" in refused.value.message_dict
    assert Schedule.objects.get(pk=schedule.pk).end_ts is None
    edits.save_schedule(schedule, ["end_ts"], actor="code")
    assert Schedule.objects.get(pk=schedule.pk).state == ScheduleState.COMPLETED


# -- item 10: a due slot is never dropped without a trace ------------------------------------------
def test_an_edit_that_skips_a_due_slot_records_a_misfire(db_now):
    schedule = minutely(db_now)
    # The leader was away: the schedule is five minutes overdue.
    sql(
        "UPDATE schedule_t SET next_run_ts = next_run_ts - interval '5 minutes',"
        " next_slot_ts = next_slot_ts - interval '5 minutes' WHERE schedule_id = %s",
        [schedule.pk],
    )
    schedule.refresh_from_db()
    due_slot = schedule.next_slot_ts
    schedule.frequency_time = 2
    edits.save_schedule(schedule, ["frequency_time"], actor="alice")
    schedule.refresh_from_db()
    assert schedule.misfire_count == 1
    assert schedule.next_run_ts >= db_now() - timedelta(seconds=5)
    edited = Event.objects.get(aggregate_id=schedule.pk, event_type="dsched.schedule.edited")
    assert edited.payload["misfired"]["slot"] == due_slot.isoformat()


def test_an_edit_keeps_a_slot_whose_jittered_run_is_still_ahead(db_now):
    now = db_now()
    slot = now - timedelta(minutes=1)
    # A schedule id whose jitter for this slot puts its run at least 4 minutes from now.
    key = next(
        uuid.UUID(int=i)
        for i in range(10_000)
        if jitter(uuid.UUID(int=i), slot, 600, slot + timedelta(hours=1)) > timedelta(minutes=5)
    )
    schedule = ScheduleFactory(
        schedule_id=key,
        frequency_unit="HOURS",
        jitter_seconds=600,
        start_ts=slot - timedelta(hours=5),
    )
    run = slot + jitter(key, slot, 600, slot + timedelta(hours=1))
    Schedule.objects.filter(pk=key).update(next_slot_ts=slot, next_run_ts=run)
    schedule.refresh_from_db()
    # Hours are durations in any zone: the grid stays, and so does the pending slot.
    schedule.time_zone = "Europe/Paris"
    edits.save_schedule(schedule, ["time_zone"])
    schedule.refresh_from_db()
    assert (schedule.next_slot_ts, schedule.next_run_ts) == (slot, run)
    assert schedule.misfire_count == 0


def test_claim_rows_match_the_database():
    # tests.fire_path builds the claim's row by hand: check it against the real CLAIM.
    from django.db import connection

    from django_dsched.firing.claim import CLAIM, claim_args
    from tests.fire_path import claim_row

    schedule = ScheduleFactory(
        start_ts=datetime(2026, 1, 1, tzinfo=UTC),
        schedule_kind=ScheduleKind.INTERVAL,
        jitter_seconds=5,
        max_fires=9,
    )
    with connection.cursor() as cursor:
        cursor.execute(CLAIM, claim_args(10))
        (row,) = cursor.fetchall()
    mine = claim_row(schedule, schedule.next_slot_ts, datetime(2026, 1, 1, tzinfo=UTC), 0)
    assert row[:6] == mine[:6] and row[7:] == mine[7:]
    assert row[5] == to_microseconds(schedule.next_slot_ts)
