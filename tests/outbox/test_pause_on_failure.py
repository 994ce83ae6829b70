"""Pause on failure (docs/overlap.md): a dead letter pauses its schedule, whoever
dead-letters it, in the same transaction, with the reason naming the run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports import PermanentDeliveryError
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def deliver() -> None:
    """One relay's round, its sends done and recorded."""
    relay = Relay(instance_id="relay-1")
    relay.step()
    relay.drain()


@pytest.fixture
def failing(relay_settings, handle):
    """Every report fails; two attempts, no wait between them."""
    relay_settings.DSCHED_RELAY_MAX_ATTEMPTS = 2
    relay_settings.DSCHED_RELAY_RETRY_BASE = 0.0
    relay_settings.DSCHED_RELAY_RETRY_MAX = 0.0

    def fail(event):
        raise RuntimeError("the report server is down")

    handle(fail, topic="reports")


def test_a_dead_letter_pauses_its_schedule_after_the_whole_retry_chain(fence, db_now, failing):
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5), pause_on_failure=True)
    other = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    assert fire(fence).fired == 2
    relay = Relay(instance_id="relay-1")
    relay.step()  # the first attempt fails: a retry, no pause
    relay.drain()
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.ACTIVE
    relay.step()  # the last attempt: a dead letter
    relay.drain()
    message = OutboxMessage.objects.get(aggregate_id=schedule.pk)
    assert message.status == DeliveryStatus.DELIVERY_FAILED
    schedule.refresh_from_db()
    assert (schedule.state, schedule.active) == (ScheduleState.PAUSED, False)
    assert str(message.id) in schedule.paused_reason
    assert "dead letter after 2 attempt(s)" in schedule.paused_reason
    [paused] = Event.objects.filter(aggregate_id=schedule.pk, event_type="dsched.schedule.paused")
    assert paused.aggregate_version == schedule.aggregate_version
    assert paused.payload["run"] == str(message.id)
    assert paused.payload["changes"] == {"state": ["ACTIVE", "PAUSED"]}
    # Without the option a dead letter changes nothing.
    other.refresh_from_db()
    assert other.state == ScheduleState.ACTIVE
    assert OutboxMessage.objects.get(aggregate_id=other.pk).status == DeliveryStatus.DELIVERY_FAILED


def test_a_permanent_failure_and_a_dead_letter_at_claim_pause_too(
    fence, db_now, relay_settings, handle
):
    def refuse(event):
        raise PermanentDeliveryError("bad input")

    handle(refuse, topic="reports")
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5), pause_on_failure=True)
    fire(fence)
    deliver()
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.PAUSED
    # Claimed too often without an outcome (its relays died): dead-lettered by the claim.
    again = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5), pause_on_failure=True)
    fire(fence)
    sql("UPDATE outbox_message_t SET attempts = 10 WHERE aggregate_id = %s", [again.pk])
    deliver()
    again.refresh_from_db()
    assert again.state == ScheduleState.PAUSED
    assert "after 10 attempt(s)" in again.paused_reason


def test_a_pause_the_database_refuses_leaves_the_dead_letter_recorded(fence, db_now, failing):
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5), pause_on_failure=True)
    fire(fence)
    sql("UPDATE outbox_message_t SET attempts = 1 WHERE aggregate_id = %s", [schedule.pk])
    sql("ALTER TABLE schedule_t ADD CONSTRAINT never_paused CHECK (state <> 'PAUSED') NOT VALID")
    try:
        deliver()
    finally:
        sql("ALTER TABLE schedule_t DROP CONSTRAINT never_paused")
    assert OutboxMessage.objects.get().status == DeliveryStatus.DELIVERY_FAILED
    assert Schedule.objects.get(pk=schedule.pk).state == ScheduleState.ACTIVE
