"""The relay loop on a real database, delivering to in-process handlers."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.claims import claim
from django_dsched.outbox.messages import Claimer, DeliveryOutcome
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.settling import settle
from django_dsched.outbox.transports import PermanentDeliveryError
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql, wait_for
from tests.outbox_helpers import make_messages, statuses
from tests.webhook_servers import Sink

pytestmark = pytest.mark.django_db(transaction=True)


def db_now():
    return sql("SELECT clock_timestamp()")[0][0]


def test_delivers_every_message_once_oldest_first(relay_settings, handle):
    seen = []
    handle(lambda event: seen.append(event["id"]), topic="reports")
    ids = make_messages(7)

    assert Relay(instance_id="r1", batch_size=3).run_until_idle() == 7

    assert seen == [str(i) for i in ids]
    assert statuses() == {DeliveryStatus.DELIVERED: 7}
    row = OutboxMessage.objects.get(id=ids[0])
    assert row.attempts == 1 and row.delivered_ts >= row.event_ts
    assert row.claimed_by == "" and row.claimed_until is None


def test_higher_priority_first(relay_settings, handle):
    seen = []
    handle(lambda event: seen.append(event["id"]), topic="reports")
    low = make_messages(2, age=60)
    high = make_messages(2, priority=5)

    Relay(instance_id="r1").run_until_idle()

    assert seen == [str(i) for i in high + low]


def test_what_became_claimable_since_the_last_claim_goes_before_the_backlog(relay_settings, handle):
    """Tenant A's backlog drains a batch at a time; tenant B's messages, claimable while it
    drains, are delivered in the next batch, ahead of the backlog."""
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
    seen = []
    handle(lambda event: seen.append(event["id"]), topic="reports", hosts="*")
    backlog = make_messages(500, age=600, host_id=uuid.UUID(int=0xA))
    relay = Relay(instance_id="r1", batch_size=50)
    try:
        relay.step()
        relay.drain()
        assert seen == [str(i) for i in backlog[:50]]
        on_time = make_messages(3, host_id=uuid.UUID(int=0xB))
        relay.step()
        relay.drain()
        # Each host's messages go in their own lane (in parallel), each in its order.
        assert sorted(seen[50:]) == sorted(str(i) for i in on_time + backlog[50:97])
        assert [i for i in seen[50:] if i in {str(m) for m in on_time}] == [str(i) for i in on_time]
        relay.step()  # nothing new: a batch of backlog
        relay.drain()
        assert seen[100:] == [str(i) for i in backlog[97:147]]
    finally:
        relay.shutdown()


def test_event_type_and_topic_handlers_both_run(relay_settings, handle):
    calls = []
    handle(lambda event: calls.append("type"), event_type="report.build")
    handle(lambda event: calls.append("topic"), topic="reports")
    make_messages(1)

    Relay(instance_id="r1").run_until_idle()

    assert calls == ["type", "topic"]


def test_failures_back_off_then_dead_letter(relay_settings, handle):
    def fail(event):
        raise RuntimeError("sink is down")

    handle(fail, topic="reports")
    (message_id,) = make_messages(1)
    relay = Relay(instance_id="r1")

    # Attempt n waits between half and all of min(4, 1 * 2**(n-1)) seconds before the next.
    for attempt, step in ((1, 1.0), (2, 2.0)):
        before = db_now()
        assert relay.run_until_idle() == 0
        after = db_now()
        row = OutboxMessage.objects.get(id=message_id)
        assert (row.status, row.attempts) == (DeliveryStatus.PENDING, attempt)
        assert row.last_error == "RuntimeError: sink is down"
        assert before + timedelta(seconds=step / 2) <= row.next_attempt_ts
        assert row.next_attempt_ts <= after + timedelta(seconds=step)
        # Not due yet: a relay claims nothing.
        assert Relay(instance_id="r2").run_until_idle() == 0
        assert OutboxMessage.objects.get(id=message_id).attempts == attempt
        OutboxMessage.objects.filter(id=message_id).update(
            next_attempt_ts=row.next_attempt_ts - timedelta(seconds=10)
        )

    relay.run_until_idle()
    row = OutboxMessage.objects.get(id=message_id)
    assert (row.status, row.attempts) == (DeliveryStatus.DELIVERY_FAILED, 3)
    assert row.next_attempt_ts is None and row.claimed_by == ""
    assert relay.stats.retried == 2 and relay.stats.dead_lettered == 1


def test_permanent_failure_dead_letters_at_once(relay_settings, handle):
    def refuse(event):
        raise PermanentDeliveryError("malformed for this sink")

    handle(refuse, topic="reports")
    (message_id,) = make_messages(1)

    Relay(instance_id="r1").run_until_idle()

    row = OutboxMessage.objects.get(id=message_id)
    assert (row.status, row.attempts) == (DeliveryStatus.DELIVERY_FAILED, 1)
    assert "malformed" in row.last_error


def test_no_handler_is_a_retryable_failure(relay_settings):
    (message_id,) = make_messages(1, topic="nobody-listens")

    Relay(instance_id="r1").run_until_idle()

    row = OutboxMessage.objects.get(id=message_id)
    assert row.status == DeliveryStatus.PENDING and row.attempts == 1
    assert "no handler is registered for topic 'nobody-listens'" in row.last_error


def test_topic_without_transport_is_a_retryable_failure(relay_settings):
    relay_settings.DSCHED_TRANSPORTS = {"reports": {"BACKEND": "handlers"}}
    (message_id,) = make_messages(1, topic="elsewhere")

    Relay(instance_id="r1").run_until_idle()

    row = OutboxMessage.objects.get(id=message_id)
    assert row.status == DeliveryStatus.PENDING
    assert "no transport is configured for topic 'elsewhere'" in row.last_error


def test_relay_only_claims_its_topics(relay_settings, handle):
    handle(lambda event: None, topic="a")
    handle(lambda event: None, topic="b")
    make_messages(2, topic="a")
    make_messages(3, topic="b")

    assert Relay(instance_id="r1", topics=["b"]).run_until_idle() == 3
    assert OutboxMessage.objects.filter(topic="a", status=DeliveryStatus.PENDING).count() == 2


def test_a_claimed_message_is_invisible_to_other_relays(relay_settings):
    make_messages(3)
    first = Claimer("r1", visibility_timeout=30, max_attempts=3)
    second = Claimer("r2", visibility_timeout=30, max_attempts=3)
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, first, 2)
    from django.db import connection

    with connection.cursor() as cursor:
        others, _ = claim(cursor, second, 10)
    assert len(live) == 2 and len(others) == 1
    assert {m.id for m in live}.isdisjoint({m.id for m in others})


def test_expired_claim_is_taken_over_and_the_stale_outcome_is_ignored(relay_settings):
    from django.db import connection

    (message_id,) = make_messages(1)
    slow = Claimer("slow", visibility_timeout=30, max_attempts=5)
    fast = Claimer("fast", visibility_timeout=30, max_attempts=5)
    with connection.cursor() as cursor:
        (stale,), _ = claim(cursor, slow, 1)
        # The slow relay hangs past its visibility timeout.
        cursor.execute(
            "UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1s'"
        )
        (fresh,), _ = claim(cursor, fast, 1)
        assert fresh.id == stale.id and fresh.attempt == stale.attempt + 1
        # Delivered: nothing comes back (test_a_settle_returns_what_the_relay_looks_at).
        assert settle(cursor, fast, [DeliveryOutcome(fresh)]) == []
        # The slow relay wakes up and reports a failure: nothing is written, and the
        # outcome comes back as not recorded.
        (lost,) = settle(cursor, slow, [DeliveryOutcome(stale, error="late", delay=1)])
        assert (lost.id, lost.status) == (stale.id, None)
    row = OutboxMessage.objects.get(id=message_id)
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.DELIVERED, 2, "")


def test_a_settle_returns_what_the_relay_looks_at(relay_settings):
    """A delivered outcome comes back only when its time is asked for (the metrics'
    latencies); a failed one always, with what was recorded."""
    from django.db import connection

    make_messages(3)
    relay = Claimer("relay", visibility_timeout=30, max_attempts=5)
    with connection.cursor() as cursor:
        (first, second, third), _ = claim(cursor, relay, 3)
        assert settle(cursor, relay, [DeliveryOutcome(first)]) == []
        (timed,) = settle(cursor, relay, [DeliveryOutcome(second)], times=True)
        assert (timed.id, timed.status) == (second.id, DeliveryStatus.DELIVERED)
        assert timed.delivered_ts is not None
        (failed,) = settle(cursor, relay, [DeliveryOutcome(third, error="down", delay=1)])
        assert (failed.id, failed.status) == (third.id, DeliveryStatus.PENDING)
        assert failed.next_attempt_ts is not None
    assert statuses() == {DeliveryStatus.DELIVERED: 2, DeliveryStatus.PENDING: 1}


def test_the_relays_reports_tell_delivered_failed_and_lost_outcomes_apart(relay_settings):
    """What a settle leaves out (a delivered outcome) counts as delivered; a failure as
    retried; an outcome whose claim another relay took over as lost, never delivered. A
    delay in whole seconds beside others' fractions (a Retry-After) is recorded too."""
    from django.db import connection

    from django_dsched.outbox.outcomes import record
    from django_dsched.outbox.reports import RelayStats, Reports
    from django_dsched.outbox.transports import Transports

    make_messages(3)
    relay = Claimer("relay", visibility_timeout=30, max_attempts=5)
    with connection.cursor() as cursor:
        (delivered, failed, taken), _ = claim(cursor, relay, 3)
        cursor.execute("UPDATE outbox_message_t SET claimed_by = 'other' WHERE id = %s", [taken.id])
        outcomes = [
            DeliveryOutcome(delivered),
            DeliveryOutcome(failed, error="down", delay=1),
            DeliveryOutcome(taken),
        ]
        recorded = record("default", cursor, relay, outcomes, lambda message: 1.0)
    stats = RelayStats()
    Reports("relay", 5, Transports({}), stats, None).recorded(recorded, {})
    assert (stats.delivered, stats.retried, stats.lost_claims) == (1, 1, 1)


def test_message_claimed_too_often_without_outcome_is_dead_lettered(relay_settings):
    from django.db import connection

    (message_id,) = make_messages(1)
    claimer = Claimer("crashy", visibility_timeout=30, max_attempts=3)
    with connection.cursor() as cursor:
        for _ in range(3):  # three relays claim it and die before recording anything
            claim(cursor, claimer, 1)
            cursor.execute(
                "UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1s'"
            )
        live, dead = claim(cursor, claimer, 1)
    assert live == [] and [m.id for m in dead] == [message_id]
    row = OutboxMessage.objects.get(id=message_id)
    assert (row.status, row.attempts) == (DeliveryStatus.DELIVERY_FAILED, 3)
    assert "claimed 3 times without a recorded outcome" in row.last_error


def test_stopping_gives_unsent_claims_back(relay_settings, handle):
    relay = Relay(instance_id="r1", batch_size=10)
    handle(lambda event: relay.stop(), topic="reports")
    make_messages(4)

    relay.run()

    assert relay.stats.delivered == 1 and relay.stats.released == 3
    rest = OutboxMessage.objects.filter(status=DeliveryStatus.PENDING)
    assert rest.count() == 3
    assert all(m.attempts == 0 and m.claimed_until is None for m in rest)


def test_long_batch_renews_its_claim(relay_settings, handle):
    relay_settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 1.0
    stolen = []

    def slow(event):
        time.sleep(0.1)  # a slow sink: the batch outlasts the visibility timeout
        with other_session() as session, session.cursor() as cursor:
            live, _ = claim(cursor, Claimer("thief", 30, 5), 10)
            stolen.extend(live)

    handle(slow, topic="reports")
    make_messages(15)
    relay = Relay(instance_id="r1", batch_size=15)

    assert relay.run_until_idle() == 15
    assert stolen == [] and relay.stats.lost_claims == 0


def test_two_relays_never_hold_the_same_message(relay_settings, handle):
    log = []
    lock = threading.Lock()

    def record(event):
        start = time.monotonic()
        time.sleep(0.001)
        with lock:
            log.append((threading.current_thread().name, event["id"], start, time.monotonic()))

    handle(record, topic="reports")
    ids = make_messages(200)
    relays = [Relay(instance_id=f"r{n}", batch_size=7) for n in (1, 2)]
    threads = [threading.Thread(target=r.run_until_idle, name=r.instance_id) for r in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    delivered = [entry[1] for entry in log]
    assert sorted(delivered) == sorted(str(i) for i in ids)  # each exactly once
    assert {entry[0].removeprefix("dsched-send-") for entry in log} == {"r1", "r2"}
    assert statuses() == {DeliveryStatus.DELIVERED: 200}


def test_a_fire_wakes_an_idle_relay_at_once(relay_settings, handle):
    delivered = threading.Event()
    handle(lambda event: delivered.set(), topic="reports")
    relay = Relay(instance_id="r1", poll_interval=60)
    thread = threading.Thread(target=relay.run)
    thread.start()
    try:
        wait_for(lambda: relay.stats.batches == 0 and relay._session, what="relay idle")
        ScheduleFactory(event_topic="reports")
        fired_at = time.monotonic()
        assert Scheduler(instance_id="leader").run_until_idle() == 1
        assert delivered.wait(5), "the relay did not wake up on the fire's NOTIFY"
        assert time.monotonic() - fired_at < 5
    finally:
        relay.stop()
        thread.join(10)
    message = OutboxMessage.objects.get()
    assert message.status == DeliveryStatus.DELIVERED


def test_run_relay_once(relay_settings, handle, capsys):
    handle(lambda event: None, topic="reports")
    make_messages(3)

    call_command("run_relay", once=True, verbosity=1)

    assert "Delivered 3 message(s)." in capsys.readouterr().out


@pytest.mark.parametrize(("atomic", "rows_left"), [(True, 0), (False, 1)])
def test_atomic_handlers_leave_no_writes_behind(relay_settings, handle, atomic, rows_left):
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "OPTIONS": {"ATOMIC": atomic}}}
    sql("CREATE TABLE relay_test_writes (id text)")
    try:

        def write_then_fail(event):
            sql("INSERT INTO relay_test_writes VALUES (%s)", [event["id"]])
            raise RuntimeError("after writing")

        handle(write_then_fail, topic="reports")
        make_messages(1)
        Relay(instance_id="r1").run_until_idle()
        assert sql("SELECT count(*) FROM relay_test_writes")[0][0] == rows_left
    finally:
        sql("DROP TABLE relay_test_writes")


def test_a_settle_the_database_fails_loses_nothing(relay_settings, handle):
    """A settle that fails with an error that is no refusal of a row (here a trigger's
    serialization failure; in life a lost session) fails the round: what the relay holds
    (the batch sent, and the one claimed while it was sent) stays claimed, and once the claims
    expire it is claimed and delivered again, with the same ids."""
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="reports")
    ids = make_messages(30)
    sql(
        "CREATE FUNCTION dsched_test_no_settle() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'no settle' USING ERRCODE = '40001'; END $$"
    )
    sql(
        "CREATE TRIGGER dsched_test_no_settle BEFORE UPDATE ON outbox_message_t FOR EACH ROW"
        " WHEN (NEW.status = 'DELIVERED') EXECUTE FUNCTION dsched_test_no_settle()"
    )
    try:
        relay = Relay(instance_id="r1", batch_size=10)
        relay.run_until_idle()
    finally:
        sql("DROP TRIGGER dsched_test_no_settle ON outbox_message_t")
        sql("DROP FUNCTION dsched_test_no_settle()")

    assert relay.stats.db_errors == 1 and relay.stats.delivered == 0
    assert len(seen) in (10, 20) and seen == [str(i) for i in ids[: len(seen)]]
    assert statuses() == {DeliveryStatus.PENDING: 30}
    claimed = OutboxMessage.objects.filter(claimed_by="r1", attempts=1)
    assert set(claimed.values_list("id", flat=True)) >= set(ids[: len(seen)])

    sql("UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1 second'")
    assert Relay(instance_id="r2", batch_size=10).run_until_idle() == 30
    assert statuses() == {DeliveryStatus.DELIVERED: 30}
    assert sorted(seen) == sorted([str(i) for i in ids[:10]] + [str(i) for i in ids])


def test_the_envelope_source_names_the_schedule_s_host_and_routes_by_it(
    relay_settings, handle, sink
):
    """The claim composes ``source`` from the event's host: a schedule created for a host
    names that host, one created without names DSCHED_DEFAULT_HOST_ID; the relay routes
    each by it (the host's own table first)."""
    host = uuid.UUID("c0ffee00-1234-4abc-8def-0123456789ab")
    relay_settings.DSCHED_TRANSPORTS_BY_HOST = {
        str(host): {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/ok", "TIMEOUT": 2}}}
    }
    seen: list[dict[str, Any]] = []
    handle(seen.append, topic="reports")
    start = db_now() - timedelta(seconds=1)
    for name, host_id in (("with-host", host), ("without-host", None)):
        api.create_once(name, at=start, topic="reports", event_type="report.build", host_id=host_id)
    Scheduler(instance_id="s1").run_until_idle()

    assert Relay(instance_id="r1").run_until_idle() == 2
    [(_, _, body)] = Sink.requests
    assert json.loads(body)["source"] == "/django-dsched/c0ffee00-1234-4abc-8def-0123456789ab"
    assert [event["source"] for event in seen] == [
        "/django-dsched/00000000-0000-0000-0000-000000000000"
    ]
