"""Idempotency keys: creating the same delayed message twice gives the existing schedule;
cancel and status by key."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "mail", "event_type": "reminder.send"}
OTHER_HOST = uuid.UUID(int=7)


def test_the_same_key_twice_gives_the_existing_schedule_and_writes_nothing():
    first = api.create_once(key="order-42", delay=timedelta(minutes=15), data={"n": 1}, **COMMON)
    again = api.create_once(key="order-42", delay=timedelta(hours=9), data={"n": 2}, **COMMON)
    assert again.schedule_id == first.schedule_id
    # The stored definition wins (as db-scheduler's scheduleIfNotExists): nothing changed.
    assert again.event_data == {"n": 1}
    assert again.start_ts == first.start_ts
    assert Schedule.objects.count() == 1
    assert Event.objects.count() == 1


def test_a_key_is_unique_per_host_and_across_kinds():
    once = api.create_once(key="k", delay=timedelta(minutes=1), **COMMON)
    elsewhere = api.create_once(key="k", delay=timedelta(minutes=1), host_id=OTHER_HOST, **COMMON)
    assert elsewhere.schedule_id != once.schedule_id
    same = api.create_interval(key="k", every=5, **COMMON)
    assert same.schedule_id == once.schedule_id
    assert Schedule.objects.count() == 2


def test_a_key_that_exists_costs_two_round_trips():
    api.create_once(key="twice", delay=timedelta(minutes=1), **COMMON)
    with CaptureQueriesContext(connections["default"]) as queries:
        api.create_once(key="twice", delay=timedelta(minutes=1), **COMMON)
    assert len(queries) == 2


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("", "An idempotency key must not be empty."),
        ("k" * 127, "at most 126 characters"),
        ("line\nbreak", "printable characters only"),
    ],
)
def test_a_bad_key_is_refused(key, fragment):
    with pytest.raises(ValidationError) as excinfo:
        api.create_once(key=key, delay=timedelta(minutes=1), **COMMON)
    assert fragment in " ".join(excinfo.value.messages)
    assert not Schedule.objects.exists()


def test_the_database_refuses_a_second_row_with_a_key():
    api.create_once(key="only", delay=timedelta(minutes=1), **COMMON)
    with pytest.raises(Exception, match="dsched_schedule_key_unique"):
        sql(
            "INSERT INTO schedule_t (schedule_id, host_id, schedule_name, schedule_kind, "
            "start_ts, next_run_ts, next_slot_ts, event_topic, event_type, event_data, "
            "idempotency_key) SELECT gen_random_uuid(), host_id, 'other', 'ONCE', start_ts, "
            "next_run_ts, next_slot_ts, event_topic, event_type, event_data, idempotency_key "
            "FROM schedule_t"
        )


def test_concurrent_creates_with_one_key_on_separate_connections_make_exactly_one():
    """Eight sessions race; each holds its transaction open after its insert, so the others
    wait on the key and must then read the winner (READ COMMITTED, a second statement)."""
    sessions = 8
    barrier = threading.Barrier(sessions)
    results: list[uuid.UUID] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            barrier.wait(timeout=30)
            with transaction.atomic():
                schedule = api.create_once(
                    key="payment-deadline:9", delay=timedelta(minutes=30), **COMMON
                )
                time.sleep(0.2)  # hold the row: the others block on the unique index
            results.append(schedule.schedule_id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(results) == sessions
    assert len(set(results)) == 1
    assert Schedule.objects.filter(idempotency_key="payment-deadline:9").count() == 1
    assert Event.objects.count() == 1


def test_cancel_and_status_by_key_and_the_seed_statuses(db_now):
    api.create_once(key="remind-1", delay=timedelta(hours=1), **COMMON)
    api.create_once(key="remind-2", delay=timedelta(hours=1), **COMMON)
    due = api.create_once(key="remind-3", delay=timedelta(0), **COMMON)
    with CaptureQueriesContext(connections["default"]) as queries:
        pending = api.status(key="remind-1")
    assert len(queries) == 1
    assert pending.message_status == DeliveryStatus.PENDING
    assert pending.key == "remind-1"

    assert api.cancel(key="remind-2") is True
    assert api.cancel(key="remind-2") is False
    cancelled = api.status(key="remind-2")
    assert (cancelled.state, cancelled.message_status) == (ScheduleState.CANCELLED, "CANCELLED")

    Scheduler(instance_id="test").run_until_idle()
    fired = api.status(key="remind-3")
    assert fired.state == ScheduleState.COMPLETED
    assert fired.message_status == DeliveryStatus.PENDING  # fired, not yet delivered
    OutboxMessage.objects.filter(aggregate_id=due.pk).update(
        status=DeliveryStatus.DELIVERED, delivered_ts=Now()
    )
    assert api.status(key="remind-3").message_status == DeliveryStatus.DELIVERED
    OutboxMessage.objects.filter(aggregate_id=due.pk).update(
        status=DeliveryStatus.DELIVERY_FAILED, delivered_ts=None, last_error="refused"
    )
    failed = api.status(key="remind-3")
    assert (failed.message_status, failed.last_error) == (DeliveryStatus.DELIVERY_FAILED, "refused")

    with pytest.raises(Schedule.DoesNotExist):
        api.status(key="nobody")
    with pytest.raises(ValidationError):
        api.status("remind-1", key="remind-1")


def test_run_now_by_key():
    schedule = api.create_once(key="remind-now", delay=timedelta(hours=1), **COMMON)
    assert api.trigger(key="remind-now") == 1
    assert OutboxMessage.objects.filter(aggregate_id=schedule.pk).count() == 1
    assert api.status(key="remind-now").message_status == DeliveryStatus.PENDING
    with pytest.raises(Schedule.DoesNotExist, match="No schedule with key 'nobody'"):
        api.trigger(key="nobody")


def test_a_key_stays_with_its_schedule_once_cancelled():
    """As docs/python-api.md says: the existing schedule comes back whatever its state;
    scheduling again needs a new key."""
    first = api.create_once(key="order-9", delay=timedelta(hours=1), **COMMON)
    assert api.cancel(key="order-9") is True
    again = api.create_once(key="order-9", delay=timedelta(hours=2), data={"n": 2}, **COMMON)
    assert (again.schedule_id, again.state) == (first.schedule_id, ScheduleState.CANCELLED)
    bulk = api.bulk_create([api.Once(key="order-9", delay=timedelta(hours=2), **COMMON)])
    assert [s.schedule_id for s in bulk] == [first.schedule_id]
    assert api.status(key="order-9").message_status == ScheduleState.CANCELLED
    assert Schedule.objects.count() == 1
    assert Event.objects.count() == 2  # created, cancelled


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"])
def test_a_key_or_name_the_database_cannot_hold_is_simply_not_found(bad):
    api.create_once(delay=timedelta(hours=1), key="real", name="real", topic="t", event_type="e")
    for lookup in (
        lambda: api.get(key=bad),
        lambda: api.cancel(key=bad),
        lambda: api.status(key=bad),
        lambda: api.get(bad),
        lambda: api.pause(bad),
    ):
        with pytest.raises(Schedule.DoesNotExist):
            lookup()
    for call in (lambda: api.bulk_cancel(keys=[bad]), lambda: api.bulk_cancel([bad])):
        with pytest.raises(ValidationError) as excinfo:
            call()
        assert [(index, message) for index, _, message in excinfo.value.item_errors] == [
            (0, "No such schedule.")
        ]
    assert Schedule.objects.get(idempotency_key="real").state == ScheduleState.ACTIVE
