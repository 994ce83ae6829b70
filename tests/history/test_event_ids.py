"""Event ids are a function of (schedule, slot): a slot fired again carries the same id."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from django_dsched import api
from django_dsched.firing.batch import fire_batch
from django_dsched.history import event_ids
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def fire(fence):
    with transaction.atomic(), connection.cursor() as cursor:
        return fire_batch(cursor, fence, 100)


def test_a_fire_s_id_is_derived_from_its_schedule_and_slot(fence, db_now):
    schedules = ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=1))
    fire(fence)
    for schedule in schedules:
        event = Event.objects.get(aggregate_id=schedule.pk)
        assert event.id == event_ids.event_id(schedule.pk, event.scheduled_ts)
        assert OutboxMessage.objects.get(aggregate_id=schedule.pk).id == event.id
        assert OutboxMessage.objects.get(pk=event.id).delivered_payload["id"] == str(event.id)
        assert event.id.version == 7
        assert event.id.variant == uuid.RFC_4122
        # The slot's time in milliseconds is in the top 48 bits: ids sort with slots.
        millis = int(event.scheduled_ts.timestamp() * 1000)
        assert event.id.int >> 80 == millis


def test_a_slot_fired_again_after_a_lost_commit_carries_the_same_id(fence, db_now):
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    fire(fence)
    first = Event.objects.get(aggregate_id=schedule.pk)
    # A failover to a replica that never got the commit: the fire is gone, the schedule is
    # back on its slot; it fires that slot again.
    sql("DELETE FROM outbox_message_t; DELETE FROM event_store_t")
    Schedule.objects.filter(pk=schedule.pk).update(
        next_run_ts=schedule.start_ts, next_slot_ts=schedule.start_ts, aggregate_version=1
    )
    fire(fence)
    again = Event.objects.get(aggregate_id=schedule.pk)
    assert again.scheduled_ts == first.scheduled_ts
    assert again.id == first.id


def test_run_now_and_backfill_ids_follow_the_same_rule(db_now):
    start = db_now() - timedelta(minutes=10)
    end = start + timedelta(minutes=3)
    schedule = api.create_interval(
        "ids", every=1, unit="MINUTES", start=start, topic="t", event_type="e"
    )
    api.trigger("ids")
    fired, _already = api.backfill("ids", start, end)
    assert fired == 4
    events = Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
    assert events.count() == 5
    for event in events:
        assert event.id == event_ids.event_id(schedule.pk, event.scheduled_ts)
    backfilled = {e.scheduled_ts: e.id for e in events}
    # A backfill of the same range again fires nothing (same slots, same ids).
    assert api.backfill("ids", start, end) == (0, 4)
    assert {e.scheduled_ts: e.id for e in events.all()} == backfilled


@settings(max_examples=60, deadline=None)
@given(
    schedule_id=st.uuids(),
    slot_us=st.one_of(
        st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),  # years 1 to 9999
        st.sampled_from([0, -1, -999, -1000, -1001, 999, 1000, 1_767_225_600_000_000]),
    ),
)
def test_sql_and_python_derive_the_same_id(schedule_id, slot_us):
    (in_sql,) = sql(
        f"SELECT {event_ids.sql('%(id)s::uuid', '%(slot)s::bigint')}",
        {"id": str(schedule_id), "slot": slot_us},
    )[0]
    assert in_sql == event_ids.event_id(schedule_id, slot_us)


def test_the_documented_example():
    schedule_id = uuid.UUID("3f0c5a9e-6a3b-4c1e-9d2f-0b7a8e6c4d21")
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    assert event_ids.event_id(schedule_id, slot) == event_ids.event_id(
        str(schedule_id), 1_767_225_600_000_000
    )
    # Pinned: consumers may compute ids themselves (docs/reference.md), so the rule never
    # changes. 0x019b76daa800 is 2026-01-01T00:00:00Z in ms; the rest is from the SHA-256
    # of "3f0c5a9e-6a3b-4c1e-9d2f-0b7a8e6c4d21/1767225600000000".
    assert str(event_ids.event_id(schedule_id, slot)) == "019b76da-a800-7d64-8502-80d148ca8d82"
