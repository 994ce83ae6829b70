"""A schedule's recent slots, scheduled against actual: on time, late, failed, missed,
skipped while paused, from its timetable, its events, its messages and its audit events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.health.activity import last_hour
from django_dsched.health.slots import Outcome, recent_slots
from django_dsched.models import Event, OutboxMessage
from tests.helpers import sql

pytestmark = pytest.mark.django_db


def db_now():
    return sql("SELECT clock_timestamp()")[0][0]


def minutely_with_a_past():
    """A minutely schedule made 30 minutes ago: slots 0-4 fired on time (2's delivery
    failed), 5-9 fired late (a backfill), 10-15 missed, 16-20 skipped (paused)."""
    now = db_now()
    t0 = now.replace(second=0, microsecond=0) - timedelta(minutes=30)
    schedule = api.create_interval("minutely", every=1, start=t0, topic="t", event_type="x")
    sql("UPDATE schedule_t SET created_ts = %s WHERE schedule_id = %s", [t0, schedule.pk])
    api.pause(schedule, reason="maintenance")
    api.resume(schedule)
    for verb, minutes in (("paused", 15.5), ("resumed", 20.5)):
        Event.objects.filter(aggregate_id=schedule.pk, event_type=f"dsched.schedule.{verb}").update(
            event_ts=t0 + timedelta(minutes=minutes)
        )
    api.backfill(schedule, t0, t0 + timedelta(minutes=9))
    sql(
        "UPDATE event_store_t SET event_ts = scheduled_ts + interval '1 second'"
        " WHERE aggregate_id = %s AND scheduled_ts < %s",
        [schedule.pk, t0 + timedelta(minutes=5)],
    )
    slot_2 = Event.objects.get(aggregate_id=schedule.pk, scheduled_ts=t0 + timedelta(minutes=2))
    OutboxMessage.objects.filter(pk=slot_2.pk).update(
        status=DeliveryStatus.DELIVERY_FAILED,
        attempts=10,
        last_error="HTTP 503",
        failed_ts=db_now(),
    )
    schedule.refresh_from_db()
    return schedule, t0, now


def test_each_slot_is_on_time_late_failed_missed_or_skipped():
    schedule, t0, _now = minutely_with_a_past()
    slots = recent_slots(schedule, db_now(), 60)
    assert slots[0].slot == t0
    assert [s.slot for s in slots] == sorted(s.slot for s in slots)
    outcomes = [s.outcome for s in slots[:21]]
    assert outcomes == (
        [Outcome.ON_TIME, Outcome.ON_TIME, Outcome.FAILED, Outcome.ON_TIME, Outcome.ON_TIME]
        + [Outcome.LATE] * 5
        + [Outcome.MISSED] * 6
        + [Outcome.SKIPPED] * 5
    )
    assert slots[0].lag == pytest.approx(1.0)
    assert slots[2].run == "DEAD"
    assert slots[7].lag > 15 * 60  # fired by the backfill, now
    assert all(s.fired is None for s in slots[10:21])

    # The newest ``count`` only.
    few = recent_slots(schedule, db_now(), 5)
    assert len(few) == 5 and few[-1].slot == slots[-1].slot


def test_a_slot_not_handled_yet_is_due_within_its_grace_then_missed():
    now = db_now()
    start = now - timedelta(seconds=20)
    due = api.create_interval("due", every=1, unit="HOURS", start=start, topic="t", event_type="x")
    [slot] = recent_slots(due, db_now(), 60)
    assert (slot.slot, slot.outcome) == (due.next_slot_ts, Outcome.DUE)
    late = api.create_interval(
        "late", every=1, unit="HOURS", start=now - timedelta(minutes=5), topic="t", event_type="x"
    )
    [slot] = recent_slots(late, db_now(), 60)
    assert slot.outcome == Outcome.MISSED
    assert (
        recent_slots(
            api.create_interval(
                "later", every=1, topic="t", event_type="x", start=now + timedelta(hours=1)
            ),
            now,
            60,
        )
        == []
    )


def test_the_last_hour_minute_by_minute():
    schedule, t0, _now = minutely_with_a_past()
    first_five = Event.objects.filter(
        aggregate_id=schedule.pk, scheduled_ts__lt=t0 + timedelta(minutes=5)
    ).values("id")
    OutboxMessage.objects.filter(pk__in=first_five).exclude(
        status=DeliveryStatus.DELIVERY_FAILED
    ).update(status=DeliveryStatus.DELIVERED, delivered_ts=db_now())
    hour = last_hour(db_now())
    assert len(hour.minutes) == len(hour.fires) == len(hour.backlog) == 60
    # Ten fires in the hour (five on time half an hour ago, five by the backfill now); in
    # this minute four were delivered and one dead-lettered, five wait.
    assert sum(hour.fires) == 10 and sum(hour.deliveries) == 4 and sum(hour.dead_letters) == 1
    first = hour.minutes.index(t0)
    assert hour.backlog[:first] == [0] * first
    assert hour.backlog[first : first + 5] == [1, 2, 3, 4, 5]
    assert hour.backlog[-1] == 5 and max(hour.backlog) == 5
