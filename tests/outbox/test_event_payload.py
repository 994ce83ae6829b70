"""What a fire delivers is stored once, in its event: its data (``payload``) and its topic
(``metadata``), and the CloudEvents envelope is composed from the event's columns when read
(models/envelope.py). A message written by a fire (or a manual trigger, or a backfill) has no
columns for them and every reader takes the event's by the shared id; retention never
deletes an event while its message exists."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_dsched import api
from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import DeliveryStatus
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.history import partitions
from django_dsched.models import Event, OutboxMessage, envelope
from django_dsched.outbox.claims import claim
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.retention import count_expired, purge_expired
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory
from tests.helpers import sql
from tests.outbox_helpers import envelope_text
from tests.webhook_servers import Sink

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86400


def fire_due() -> int:
    """Fire every due schedule through the real fire path; how many fired."""
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="t", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire() and lease.epoch is not None
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(cursor, Fence(1, "t", lease.epoch, 30.0), 100)
    return result.fired


def fired(count: int = 1, **data: Any) -> list[Any]:
    """``count`` schedules fired once each; the ids of their messages (oldest first)."""
    start = database_now() - timedelta(seconds=1)
    for n in range(count):
        ScheduleFactory(start_ts=start, event_data={"n": n, **data})
    assert fire_due() == count
    return list(OutboxMessage.objects.order_by("event_ts", "id").values_list("id", flat=True))


def test_every_outbox_writer_stores_the_payload_only_in_the_event():
    """The leader's fire, run now and a backfill: each message has its event's id, topic and
    priority, and the event holds the payload; the message has no column for one."""
    fired(2)  # the leader's fire
    schedule = api.create_interval(
        "manual", every=1, unit="HOURS", topic="reports", event_type="report.build"
    )
    api.trigger(schedule)  # run now
    start = database_now().replace(microsecond=0) - timedelta(hours=3)
    backfilled = api.create_interval(
        "past", every=1, unit="HOURS", start=start, topic="reports", event_type="report.build"
    )
    api.backfill(backfilled, start, start + timedelta(hours=1))

    rows = sql(
        f"SELECT ({envelope.sql('e')})::jsonb->>'id' = o.id::text, o.topic = e.metadata->>'topic',"
        " o.priority = (e.metadata->>'priority')::int,"
        " e.payload = s.event_data, e.scheduled_ts IS NOT NULL"
        " FROM outbox_message_t o JOIN event_store_t e ON e.id = o.id"
        " JOIN schedule_t s ON s.schedule_id = e.aggregate_id"
    )
    assert rows == [(True, True, True, True, True)] * 5
    columns = {
        c.name
        for c in connection.introspection.get_table_description(
            connection.cursor(), "outbox_message_t"
        )
    }
    assert not {"payload", "metadata"} & columns


def test_the_relay_delivers_the_events_payload_byte_for_byte(settings, sink):
    settings.DSCHED_TRANSPORTS = {
        "*": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/ok/{topic}", "TIMEOUT": 2}}
    }
    ids = fired(3, text="é ✓ <b>", nested={"a": [1, 2.5, None, True]})

    assert Relay(instance_id="r1").run_until_idle() == 3

    assert len(Sink.requests) == 3
    # Sent at once (the webhook's concurrency): in any order.
    requests = sorted(Sink.requests, key=lambda r: ids.index(uuid.UUID(r[1]["Idempotency-Key"])))
    for (_, headers, body), id_ in zip(requests, ids, strict=True):
        event = Event.objects.get(pk=id_)
        # The envelope's text as the database composes it from the event: what the webhook
        # sends, byte for byte (and what the admin and REST show).
        assert body == envelope_text(id_).encode()
        assert json.loads(body) == envelope.of_event(id_)
        sent = json.loads(body)
        times = {name: datetime.fromisoformat(sent.pop(name)) for name in ("time", "scheduledtime")}
        assert times == {"time": event.event_ts, "scheduledtime": event.scheduled_ts}
        assert sent == {
            "specversion": "1.0",
            "id": str(id_),
            "source": f"/django-dsched/{event.host_id}",
            "subject": str(event.aggregate_id),
            "type": event.event_type,
            "datacontenttype": "application/json",
            "topic": event.metadata["topic"],
            "data": event.payload,
        }
        assert event.payload["text"] == "é ✓ <b>"
        assert json.loads(body)["id"] == str(id_) == headers["Idempotency-Key"]
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}


def test_the_byte_cap_counts_the_events_payload(relay_settings):
    ids = fired(4, blob="x" * 5000)
    sizes = dict(
        sql(
            f"SELECT id, octet_length({envelope.sql('e')}::text) FROM event_store_t e"
            " WHERE id = ANY(%s)",
            [ids],
        )
    )
    relay = Relay(instance_id="r1")
    with connection.cursor() as cursor:
        live, dead = claim(cursor, relay.claimer, 100, max_bytes=2 * sizes[ids[0]] + 10)
    assert [m.id for m in live] == ids[:2] and not dead
    assert [m.size for m in live] == [sizes[i] for i in ids[:2]]
    assert [m.payload for m in live] == [envelope.of_event(i) for i in ids[:2]]


def test_a_message_whose_event_was_deleted_is_dead_lettered_with_its_reason(
    relay_settings, handle, caplog
):
    delivered: list[dict[str, Any]] = []
    handle(delivered.append, topic="reports")
    gone, kept = fired(2)
    sql("DELETE FROM event_store_t WHERE id = %s", [gone])  # by hand: retention never does

    relay = Relay(instance_id="r1")
    assert relay.run_until_idle() == 1

    message = OutboxMessage.objects.get(pk=gone)
    assert message.status == DeliveryStatus.DELIVERY_FAILED
    assert "its event (the same id) was deleted" in message.last_error
    assert OutboxMessage.objects.get(pk=kept).status == DeliveryStatus.DELIVERED
    assert [event["id"] for event in delivered] == [str(kept)]
    assert relay.stats.dead_lettered == 1
    (logged,) = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert "no payload to deliver: its event (the same id) was deleted" in logged


def test_the_message_reads_its_payload_from_the_event(relay_settings):
    (id_,) = fired(1)
    message = OutboxMessage.objects.get(pk=id_)
    assert message.delivered_payload == envelope.of_event(id_)
    assert message.delivered_payload["id"] == str(id_)
    assert message.delivered_payload["data"] == Event.objects.get(pk=id_).payload
    # Read from the event each time: there is no other copy.
    sql("UPDATE event_store_t SET payload = '{\"other\": 1}' WHERE id = %s", [id_])
    assert OutboxMessage.objects.get(pk=id_).delivered_payload["data"] == {"other": 1}


# -- retention --------------------------------------------------------------------------------


def age(ids: list[Any], *, fired_days: float, delivered_days: float | None) -> list[Any]:
    """Move the fires ``fired_days`` back (their slots, so their ids, which carry the slot's
    time, as a fire of then has them); mark them delivered ``delivered_days`` ago. Returns
    their ids now."""
    shift_ms = round(fired_days * DAY * 1000)
    low = (1 << 80) - 1
    moved = []
    for id_ in ids:
        old = uuid.UUID(str(id_))
        new = uuid.UUID(int=(((old.int >> 80) - shift_ms) << 80) | (old.int & low))
        sql(
            "UPDATE event_store_t SET id = %s, event_ts = event_ts - make_interval(secs => %s),"
            " scheduled_ts = scheduled_ts - make_interval(secs => %s) WHERE id = %s",
            [new, shift_ms / 1000, shift_ms / 1000, old],
        )
        sql(
            "UPDATE outbox_message_t SET id = %s,"
            " event_ts = event_ts - make_interval(secs => %s),"
            " status = CASE WHEN %s::float8 IS NULL THEN status ELSE 'DELIVERED' END,"
            " delivered_ts = statement_timestamp() - make_interval(secs => %s)"
            " WHERE id = %s",
            [new, shift_ms / 1000, delivered_days, (delivered_days or 0) * DAY, old],
        )
        moved.append(new)
    return moved


def remaining(ids: list[Any]) -> tuple[int, int]:
    return (
        OutboxMessage.objects.filter(id__in=ids).count(),
        Event.objects.filter(id__in=ids).count(),
    )


@pytest.fixture
def rows_in_the_default_partitions():
    """The row-by-row rules of retention, which apply to the default partitions: the day
    partitions are dropped for the test (made again after it), so today's fires land there.
    (Whole days, held by a message: tests/history/test_partitions.py.)"""
    for day in partitions.days():
        sql(
            f"DROP TABLE {partitions.partition(partitions.OUTBOX, day)},"
            f" {partitions.partition(partitions.EVENTS, day)}"
        )
    yield
    partitions.make_ahead()


@pytest.mark.usefixtures("rows_in_the_default_partitions")
def test_retention_keeps_an_event_while_its_message_exists(settings):
    settings.DSCHED_RETENTION_DAYS = 45
    late, old = fired(2)
    # Fired 60 days ago, delivered yesterday (a dead letter retried): the message stays, so
    # does the event it reads its payload from.
    (late,) = age([late], fired_days=60, delivered_days=1)
    # Both expired: the message goes, then its event, in the same pass.
    (old,) = age([old], fired_days=60, delivered_days=50)

    found = count_expired()
    purged = purge_expired()
    # `old`'s message, then its event (the message goes first, in the pass).
    assert (purged.outbox, purged.events) == (1, 1)
    assert (found.outbox, found.events) == (purged.outbox, purged.events)
    assert remaining([late]) == (1, 1)
    assert remaining([old]) == (0, 0)
    assert OutboxMessage.objects.get(pk=late).delivered_payload["id"] == str(late)

    # Once the late message expires too, it and its event go.
    (late,) = age([late], fired_days=0, delivered_days=50)
    found = count_expired()
    purged = purge_expired()
    assert (found.outbox, found.events) == (purged.outbox, purged.events)
    assert (purged.outbox, purged.events) == (1, 1)
    assert remaining([late]) == (0, 0)


@pytest.mark.usefixtures("rows_in_the_default_partitions")
def test_retention_keeps_the_event_of_a_pending_or_dead_message(settings):
    settings.DSCHED_RETENTION_DAYS = 45
    pending, dead = fired(2)
    pending, dead = age([pending, dead], fired_days=60, delivered_days=None)
    OutboxMessage.objects.filter(pk=dead).update(status=DeliveryStatus.DELIVERY_FAILED)
    assert purge_expired() == purge_expired().__class__(0, 0, False)
    assert remaining([pending, dead]) == (2, 2)
