from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from django_dsched.enums import DeliveryStatus, FrequencyUnit, ScheduleState
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.claim import CLAIM, claim_args
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.helpers import other_session, second_event, sql

pytestmark = pytest.mark.django_db(transaction=True)


def make_due(db_now, ago=timedelta(seconds=1), **kwargs):
    start = db_now() - ago
    return ScheduleFactory(start_ts=start, **kwargs)


def test_a_fire_writes_event_and_outbox_and_advances(fence, db_now):
    schedule = make_due(db_now, event_data={"k": [1, 2]})
    result = fire(fence)
    assert (result.claimed, result.fired, result.fenced) == (1, 1, False)

    event = Event.objects.get()
    message = OutboxMessage.objects.get()
    schedule.refresh_from_db()
    assert event.id == message.id
    assert event.aggregate_id == schedule.schedule_id == message.aggregate_id
    assert event.scheduled_ts == schedule.start_ts
    assert event.leader_epoch == fence.epoch
    assert event.aggregate_version == 2 == schedule.aggregate_version
    assert message.status == DeliveryStatus.PENDING
    assert message.topic == "reports"
    assert schedule.next_run_ts == schedule.start_ts + timedelta(minutes=1)
    assert schedule.fire_count == 1
    assert schedule.last_fired_ts == event.event_ts
    assert event.payload == {"k": [1, 2]}  # the data; the envelope is composed when read
    assert event.metadata["topic"] == "reports"
    payload = message.delivered_payload
    assert payload["specversion"] == "1.0"
    assert payload["id"] == str(event.id)
    assert payload["type"] == "report.build"
    assert payload["topic"] == "reports"
    assert payload["data"] == {"k": [1, 2]}
    assert payload["subject"] == str(schedule.schedule_id)
    assert payload["scheduledtime"].startswith(schedule.start_ts.isoformat()[:19])
    assert event.metadata["instance_id"] == "test"


def test_after_downtime_a_schedule_fires_once_for_the_latest_missed_slot(fence, db_now):
    schedule = make_due(db_now, ago=timedelta(minutes=30, seconds=10))
    assert fire(fence).fired == 1
    assert fire(fence).claimed == 0
    event = Event.objects.get()
    schedule.refresh_from_db()
    assert event.scheduled_ts == schedule.start_ts + timedelta(minutes=30)
    assert schedule.next_run_ts == schedule.start_ts + timedelta(minutes=31)


def test_only_active_due_schedules_fire(fence, db_now):
    make_due(db_now, paused=True)
    make_due(db_now, cancelled=True)
    ScheduleFactory(start_ts=db_now() + timedelta(hours=1))
    due = make_due(db_now)
    fire(fence)
    assert list(Event.objects.values_list("aggregate_id", flat=True)) == [due.schedule_id]


def test_batches_are_bounded_and_oldest_first(fence, db_now):
    old = [make_due(db_now, ago=timedelta(seconds=50 - i)) for i in range(3)]
    make_due(db_now, ago=timedelta(seconds=1))
    result = fire(fence, batch_size=3)
    assert result.claimed == 3
    assert set(Event.objects.values_list("aggregate_id", flat=True)) == {s.schedule_id for s in old}


def test_expired_lease_fires_nothing(fence, db_now):
    make_due(db_now)
    sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '1 hour'")
    result = fire(fence)
    assert result.fenced
    assert Event.objects.count() == OutboxMessage.objects.count() == 0
    assert Schedule.objects.get().fire_count == 0


def test_superseded_epoch_fires_nothing(fence, db_now):
    schedule = make_due(db_now)
    sql("UPDATE scheduler_lock_t SET epoch = epoch + 1, instance_id = 'other'")
    assert fire(fence).fenced
    assert Event.objects.count() == 0
    schedule.refresh_from_db()
    assert schedule.next_run_ts == schedule.start_ts


def test_a_takeover_waits_for_the_fire_in_flight_to_commit(fence, db_now):
    """Once the fence passed, the lease cannot change hands until the fire commits."""
    make_due(db_now)
    with transaction.atomic(), connection.cursor() as cursor:
        assert fire_batch(cursor, fence, 10).fired == 1
        with other_session() as standby:
            sql("SET lock_timeout = '200ms'", using=standby)
            with pytest.raises(Exception, match="lock timeout"):
                sql("UPDATE scheduler_lock_t SET epoch = epoch + 1", using=standby)


def test_concurrent_claims_get_disjoint_sets(db_now):
    schedules = [make_due(db_now) for _ in range(10)]
    with other_session() as s1, other_session() as s2:
        s1.set_autocommit(False)
        s2.set_autocommit(False)
        first = {row[0] for row in sql(CLAIM, claim_args(6), using=s1)}
        second = {row[0] for row in sql(CLAIM, claim_args(6), using=s2)}
        s1.rollback()
        s2.rollback()
    assert len(first) == 6 and len(second) == 4
    assert first.isdisjoint(second)
    assert first | second == {str(s.schedule_id) for s in schedules}


def test_an_error_mid_batch_leaves_nothing(fence, db_now):
    make_due(db_now)
    make_due(db_now, event_topic="poison")
    sql(
        """
        CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.topic = 'poison' THEN RAISE EXCEPTION 'poisoned outbox row'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_poison BEFORE INSERT ON outbox_message_t
            FOR EACH ROW EXECUTE FUNCTION test_poison();
        """
    )
    try:
        with pytest.raises(Exception, match="poisoned outbox row"):
            fire(fence)
    finally:
        sql("DROP TRIGGER test_poison ON outbox_message_t; DROP FUNCTION test_poison();")
    assert Event.objects.count() == 0
    assert OutboxMessage.objects.count() == 0
    assert set(Schedule.objects.values_list("fire_count", flat=True)) == {0}
    assert all(s.next_run_ts == s.start_ts for s in Schedule.objects.all())


def test_the_database_refuses_a_second_event_for_a_slot(fence, db_now):
    make_due(db_now)
    fire(fence)
    event = Event.objects.get()
    # Another id with the slot's time in it (the CHECK dsched_event_slot_in_id refuses any
    # other): the slot's partition's unique index refuses it.
    with pytest.raises(IntegrityError, match="dsched_event_one_per_slot"), transaction.atomic():
        second_event(event)


def test_a_slot_that_already_fired_is_skipped_not_fired_again(fence, db_now):
    schedule = make_due(db_now)
    fire(fence)
    # Put the schedule back on the slot it already fired (as a bad restore would).
    Schedule.objects.filter(pk=schedule.pk).update(
        next_run_ts=schedule.start_ts, next_slot_ts=schedule.start_ts
    )
    result = fire(fence)
    assert (result.claimed, result.fired, result.duplicates) == (1, 0, 1)
    assert Event.objects.count() == OutboxMessage.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_ts == schedule.start_ts + timedelta(minutes=1)


def test_a_schedule_whose_grid_runs_off_the_calendar_fires_once_and_completes(fence, db_now):
    # Validation refuses such a period; a row written behind its back still must not wedge
    # the fire path.
    schedule = make_due(db_now, frequency_unit=FrequencyUnit.YEARS)
    Schedule.objects.filter(pk=schedule.pk).update(frequency_time=100_000)
    assert fire(fence).fired == 1
    schedule.refresh_from_db()
    assert (schedule.state, schedule.active) == (ScheduleState.COMPLETED, False)
    assert fire(fence).claimed == 0


def test_the_poll_uses_the_partial_index(db_now):
    ScheduleFactory.create_batch(50, start_ts=db_now().replace(microsecond=0) + timedelta(days=1))
    sql("ANALYZE schedule_t")
    with transaction.atomic():
        sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in sql("EXPLAIN " + CLAIM, claim_args(500)))
    assert "dsched_schedule_due_idx" in plan
    # Many schedules due at the same instant (an hourly cron) are read in order, not sorted.
    # (A Merge Append's "Sort Key" is the overlap probe's: the newest message of a row that
    # is not ALLOW_ALL, per day, in version order. The backlog's hosts are put in turn, and
    # its probes of one host each may sort the few rows a tiny table gives them:
    # tests/firing/test_fairness.py reads a large backlog.)
    sorted_by = re.findall(r"^\s*(?:->\s+)?Sort\s+\(.*\n\s*Sort Key: (.*)$", plan, re.MULTILINE)
    assert all("host_id" in key or "behind." in key for key in sorted_by), plan


def test_state_matches_active_after_a_fire(fence, db_now):
    make_due(db_now)
    fire(fence)
    assert list(Schedule.objects.values_list("state", "active")) == [(ScheduleState.ACTIVE, True)]
