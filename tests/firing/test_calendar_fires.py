"""Calendar-filtered schedules fired end to end: a real scheduler (in-process, driven) fires
them, a real relay delivers to an in-process handler; what the calendars did is in the
schedule's history and in the metrics, and a calendar edit reaches the next plan without a
write to the schedule.

Slots are placed relative to the database's clock: the stored next slot is set back to a
past slot (as after a day of downtime), so nothing sleeps.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from prometheus_client import REGISTRY

from django_dsched import api
from django_dsched.changes import calendars
from django_dsched.enums import CalendarPolicy
from django_dsched.metrics.scheduler import scheduler_metrics
from django_dsched.models import Calendar, Event, OutboxMessage, Schedule
from django_dsched.outbox.handlers import registry
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "Europe/Brussels"
# What any write to a schedule's row changes (xmin: the transaction that wrote it).
ROW_VERSION = (
    "SELECT aggregate_version, updated_ts, xmin::text FROM schedule_t WHERE schedule_id = %s"
)
COMMON = {"topic": "finance", "event_type": "close.month"}


def db_now() -> datetime:
    return sql("SELECT statement_timestamp()")[0][0]


def at(day: date, hour: int, zone: str = ZONE) -> datetime:
    return datetime.combine(day, time(hour), ZoneInfo(zone)).astimezone(UTC)


def due_again(schedule: Schedule, slot: datetime) -> None:
    """As after downtime: the stored next slot (and run) is ``slot``, in the past."""
    sql(
        "UPDATE schedule_t SET next_slot_ts = %s, next_run_ts = %s WHERE schedule_id = %s",
        [slot, slot, schedule.pk],
    )


def fire(metrics: bool = False) -> int:
    scheduler = Scheduler(
        instance_id="test", batch_size=50, metrics=scheduler_metrics() if metrics else None
    )
    return scheduler.run_until_idle()


def fired_slots(schedule: Schedule) -> list[datetime]:
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )


def notes(schedule: Schedule) -> list[dict]:
    """The payloads of its ``dsched.schedule.slots_filtered`` events, oldest first."""
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, event_type="dsched.schedule.slots_filtered")
        .order_by("aggregate_version")
        .values_list("payload", flat=True)
    )


def counted(fate: str) -> float:
    return REGISTRY.get_sample_value("dsched_calendar_slots_total", {"fate": fate}) or 0.0


def previous_business_day(day: date, off: set[date]) -> date:
    day -= timedelta(days=1)
    while day.weekday() >= 5 or day in off:
        day -= timedelta(days=1)
    return day


def test_a_holiday_moves_a_month_end_run_to_the_previous_business_day_and_the_worker_gets_it(
    settings,
):
    settings.DSCHED_TRANSPORTS = {"finance": {"BACKEND": "handlers"}}
    today = db_now().astimezone(ZoneInfo(ZONE)).date()
    month_end = today.replace(day=1) - timedelta(days=1)  # the last one before today
    ops = api.create_calendar("Ops", added=[month_end])  # a holiday on it, and weekends
    # Until that month-end (its whole day): the next month's is not due yet whatever today is.
    schedule = api.create_rrule(
        "month-end close",
        rrule=f"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=17;BYMINUTE=0;UNTIL={month_end:%Y%m%d}",
        time_zone=ZONE,
        start=at(month_end, 0) - timedelta(days=40),
        calendars=[ops],
        calendar_policy=CalendarPolicy.BACKWARD,
        **COMMON,
    )
    moved = at(previous_business_day(month_end, {month_end}), 17)
    due_again(schedule, moved)
    received = []

    def worker(event: dict) -> None:
        received.append(event)

    registry.register(worker, topic="finance")
    try:
        assert fire() == 1
        assert Relay(instance_id="relay").run_until_idle() == 1
    finally:
        registry.unregister(worker, topic="finance")

    assert fired_slots(schedule) == [moved]
    assert [datetime.fromisoformat(event["scheduledtime"]) for event in received] == [moved]
    assert OutboxMessage.objects.get(aggregate_id=schedule.pk).status == "DELIVERED"
    (note,) = notes(schedule)
    (entry,) = note["slots"]
    assert entry["fate"] == "shifted" and note["shifted"] == 1
    assert entry["slot"] == at(month_end, 17).isoformat()
    assert entry["fires_at"] == moved.isoformat()
    assert entry["calendar"] == "Ops" and entry["reason"] in ("excluded date", "weekend")
    schedule.refresh_from_db()
    assert schedule.misfire_count == 0  # a moved slot is not a misfire


def test_an_excluded_slot_is_audited_and_counted_never_a_misfire():
    today = db_now().date()
    ops = api.create_calendar("Ops", added=[today], weekend=[])
    schedule = api.create_rrule(
        "midnight",
        rrule="FREQ=DAILY;BYHOUR=0;BYMINUTE=0",
        start=at(today, 0, "UTC") - timedelta(days=7),
        calendars=[ops.pk],
        **COMMON,
    )
    yesterday = at(today - timedelta(days=1), 0, "UTC")
    due_again(schedule, yesterday)
    before = counted("excluded")

    assert fire(metrics=True) == 1

    schedule.refresh_from_db()
    assert fired_slots(schedule) == [yesterday]
    assert schedule.next_slot_ts == at(today + timedelta(days=1), 0, "UTC")  # today's: dropped
    (note,) = notes(schedule)
    assert note["excluded"] == 1 and note["actor"] == "scheduler"
    assert note["slots"] == [
        {
            "slot": at(today, 0, "UTC").isoformat(),
            "fate": "excluded",
            "fires_at": None,
            "calendar": "Ops",
            "reason": "excluded date",
        }
    ]
    assert counted("excluded") - before == 1
    assert schedule.misfire_count == 0
    # On the schedule's version sequence: created (1), the fire (2), the note (3).
    assert list(
        Event.objects.filter(aggregate_id=schedule.pk)
        .order_by("aggregate_version")
        .values_list("aggregate_version", flat=True)
    ) == [1, 2, 3]


def test_a_calendar_edit_changes_the_next_plan_without_touching_the_schedule():
    today = db_now().date()
    ops = api.create_calendar("Ops", weekend=[])
    schedule = api.create_interval(
        "daily", every=1, unit="DAYS", start=at(today, 0, "UTC") - timedelta(days=7),
        calendars=["Ops"], **COMMON,
    )  # fmt: skip
    yesterday = at(today - timedelta(days=1), 0, "UTC")
    due_again(schedule, yesterday)
    written = sql(ROW_VERSION, [schedule.pk])

    ops.added_dates = [today - timedelta(days=1), today]  # the stored slot's day, and today's
    calendars.save_calendar(ops)
    assert sql(ROW_VERSION, [schedule.pk]) == written  # no write to the schedule

    assert fire() == 0  # the stored slot is no longer one; today's is dropped too

    schedule.refresh_from_db()
    assert fired_slots(schedule) == []
    assert schedule.next_slot_ts == at(today + timedelta(days=1), 0, "UTC")
    (note,) = notes(schedule)
    assert [(entry["slot"], entry["fate"]) for entry in note["slots"]] == [
        (yesterday.isoformat(), "excluded"),
        (at(today, 0, "UTC").isoformat(), "excluded"),
    ]

    ops.added_dates = []  # edited back: tomorrow's slot is there as it was
    calendars.save_calendar(ops)
    assert [slot.fate for slot in api.preview_slots(schedule, 2)] == ["fires", "fires"]


def test_a_deleted_calendar_sets_its_schedule_aside_and_the_others_fire():
    today = db_now().date()
    ops = api.create_calendar("Ops", weekend=[])
    start = at(today, 0, "UTC") - timedelta(days=7)
    lost = api.create_rrule("lost", rrule="FREQ=DAILY", start=start, calendars=[ops], **COMMON)
    plain = api.create_rrule("plain", rrule="FREQ=DAILY", start=start, **COMMON)
    for schedule in (lost, plain):
        due_again(schedule, at(today, 0, "UTC"))
    Calendar.objects.filter(pk=ops.pk).delete()  # behind the service's back

    assert fire() == 1

    lost.refresh_from_db()
    assert lost.state == "SET_ASIDE"
    assert f"calendar {ops.pk} does not exist" in lost.set_aside_reason
    assert fired_slots(plain) == [at(today, 0, "UTC")]
