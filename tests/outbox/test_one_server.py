"""A relay's sessions on one server (runtime/one_server.py), and no claim while two hosts of
its URL accept writes (runtime/split_brain.py): every thread that opens a session of its own
(the claim thread, the claim heartbeat) and the scheduler's history thread refuse a session on
another server than their loop's; the real split, an old primary back writable beside the
promoted one, is in tests/integration/test_failover.py."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import connection, connections

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.claiming import Taken
from django_dsched.outbox.claims import claim
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.messages import Claimed, Claimer
from django_dsched.outbox.relay import Relay
from django_dsched.runtime.one_server import OtherServer, ServerPin, identify
from django_dsched.scheduler.retention_worker import worker_for
from tests.helpers import other_session, sql
from tests.outbox_helpers import make_messages
from tests.runtime.test_split_brain import NOT_READY, Split

pytestmark = pytest.mark.django_db(transaction=True)

ELSEWHERE = "7 started 2026-01-01 00:00:00+00"  # a server this test's is not


def on_a_thread(work):
    """Run ``work`` on a thread of its own (its own Django connection); its result or error."""
    out: dict[str, object] = {}

    def run():
        try:
            out["result"] = work()
        except BaseException as exc:
            out["error"] = exc
        finally:
            connections["default"].close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out


def test_a_session_on_the_loops_server_passes_once_per_session_and_another_is_closed():
    here = identify(connection)
    pin = ServerPin("relay=r1")
    pin.set(here, "127.0.0.1:1")
    queries = []

    def checked_twice():
        with connection.execute_wrapper(lambda run, sql, *a: queries.append(sql) or run(sql, *a)):
            pin.check(connection)
            pin.check(connection)  # the same session: not asked again
        return connection.connection is not None

    assert on_a_thread(checked_twice) == {"result": True}
    assert len(queries) == 1

    pin.set(ELSEWHERE, "127.0.0.1:2")  # the loop's session moved: every thread's is asked again

    def refused():
        try:
            pin.check(connection)
        finally:
            assert connection.connection is None  # closed: the next session tries again

    error = on_a_thread(refused)["error"]
    assert isinstance(error, OtherServer)
    assert "another server than relay=r1's" in str(error) and "127.0.0.1:2" in str(error)

    pin.set(here, "127.0.0.1:1", direct=True)  # a direct session: its settings too

    def settings():
        pin.check(connection)
        return sql("SELECT current_setting('jit')", using=connection)

    assert on_a_thread(settings) == {"result": [("off",)]}
    pin.set(here, "127.0.0.1:1", direct=False)  # behind a pooler: the server's own
    assert on_a_thread(settings) == {"result": [("on",)]}

    pin.clear()  # the loop lost its own session: no thread works meanwhile
    error = on_a_thread(lambda: pin.check(connection))["error"]
    assert isinstance(error, OtherServer) and "has no session of its own" in str(error)


def test_a_claim_on_another_server_claims_nothing(relay_settings, caplog):
    (id_,) = make_messages(1)
    relay = Relay(instance_id="r1")
    try:
        relay._ensure_session()
        relay.pin.set(ELSEWHERE, "127.0.0.1:2")  # the claim thread reaches another server
        with caplog.at_level(logging.WARNING, logger="django_dsched"):
            out = on_a_thread(lambda: relay._claim_here(10, 10**6, None, [], 0))
        assert out["result"].live == [] and out["result"].dead == []
        assert "claimed nothing: this session reached another server" in caplog.text
        row = OutboxMessage.objects.get(id=id_)
        assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 0)
        relay.pin.set(identify(connections[relay.using]), "here")  # back on one server
        out = on_a_thread(lambda: relay._claim_here(10, 10**6, None, [], 0))
        assert [m.id for m in out["result"].live] == [id_]
    finally:
        relay.shutdown()


def test_a_relay_claims_nothing_while_two_hosts_accept_writes(relay_settings, handle):
    delivered = []
    handle(lambda event: delivered.append(event["id"]), topic="reports")
    make_messages(3)
    relay = Relay(instance_id="r1")
    split = Split(relay)
    try:
        relay._guarded(relay.step)
        relay.drain()
        assert delivered == []
        assert relay.readiness() == NOT_READY
        split.end()
        relay._claim_full = True
        relay._guarded(relay.step)
        relay.drain()
        assert len(delivered) == 3 and relay.readiness() == (True, "connected")
    finally:
        relay.shutdown()


def test_the_heartbeat_renews_nothing_on_another_server_and_says_why_in_a_line(
    relay_settings, caplog
):
    make_messages(1)
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
    (before,) = sql("SELECT claimed_until FROM outbox_message_t")[0]
    pin = ServerPin("relay=r1")
    pin.set(ELSEWHERE, "127.0.0.1:2")
    beat = ClaimHeartbeat(Claimer("r1", 300, 5), 60, "default", pin=pin)
    try:
        beat.hold(live)
        with caplog.at_level(logging.WARNING, logger="django_dsched"):
            assert on_a_thread(beat.beat) == {"result": None}
        assert beat.beats == 0 and beat.lost() == set()
        record = next(r for r in caplog.records if "could not renew" in r.getMessage())
        assert "another server than relay=r1's" in record.getMessage()
        assert record.exc_info is None  # one line: an outage, not a bug
        assert sql("SELECT claimed_until FROM outbox_message_t")[0][0] == before
        pin.set(identify(connection), "here")
        assert on_a_thread(beat.beat) == {"result": None}
        assert beat.beats == 1
        assert sql("SELECT claimed_until FROM outbox_message_t")[0][0] > before
    finally:
        beat.stop()


def test_the_schedulers_history_thread_works_on_no_other_server(caplog):
    pin = ServerPin("scheduler=s1")
    pin.set(ELSEWHERE, "127.0.0.1:2")
    upkeep = worker_for(lambda: True, "s1", "default", pause=0.5, pin=pin)
    ran = []
    with caplog.at_level(logging.WARNING, logger="django_dsched"):
        out = on_a_thread(lambda: upkeep._attempt("retention", lambda: ran.append(1)))
    assert out == {"result": None} and ran == []
    assert "retention failed (this session reached another server" in caplog.text
    pin.set(identify(connection), "here")
    assert on_a_thread(lambda: upkeep._attempt("retention", lambda: ran.append(1))) == {
        "result": None
    }
    assert ran == [1]


def unclaimed(id_) -> None:
    """The server the relay is on now never saw the claim (a failover lost the primary's
    last commits): the message is claimable there, as before it."""
    sql(
        "UPDATE outbox_message_t SET claimed_by = '', claimed_until = NULL, attempts = 0"
        " WHERE id = %s",
        [id_],
    )


def test_a_relay_on_a_new_session_renews_what_it_holds_before_sending_more(relay_settings):
    (id_,) = make_messages(1)
    relay = Relay(instance_id="r1")
    try:
        relay._ensure_session()
        with other_session() as session, session.cursor() as cursor:
            live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
        relay.heartbeat.hold(live)
        unclaimed(id_)
        relay._lost_connection()
        relay._ensure_session()  # a new session, on the server that lacks the claim
        assert relay.heartbeat.lost() == {id_}  # not sent by this relay
    finally:
        relay.shutdown()


def test_a_claim_begun_before_the_relays_session_moved_is_renewed_before_it_is_sent(
    relay_settings,
):
    (id_,) = make_messages(1)
    relay = Relay(instance_id="r1")
    try:
        relay._ensure_session()
        generation = relay.pin.generation  # a claim begins on a claim thread
        with other_session() as session, session.cursor() as cursor:
            live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
        # Meanwhile the relay's session was lost and a new one reached a server without it.
        relay._lost_connection()
        relay._ensure_session()
        unclaimed(id_)
        relay._took(Taken(Claimed(live, []), 10, time.monotonic(), generation))  # not old
        assert relay.dispatch.held == {} and relay.stats.claimed == 0
    finally:
        relay.shutdown()


def test_a_relay_whose_new_session_starts_during_a_split_claims_nothing(relay_settings, handle):
    """The split is on before the relay's session is (its watch has not seen it yet): the
    relay looks at the hosts before it uses the session, and claims nothing from its first
    step, on its own session or on the claim thread."""
    delivered = []
    handle(lambda event: delivered.append(event["id"]), topic="reports")
    make_messages(3)
    relay = Relay(instance_id="r1")
    Split(relay, seen=False)
    try:
        relay._guarded(relay.step)
        relay.drain()
        assert delivered == [] and relay.readiness() == NOT_READY
        assert relay._claim_here(10, 10**6, None, [], 0).live == []
    finally:
        relay.shutdown()


def test_a_claim_taken_once_a_split_is_seen_is_not_sent(relay_settings, caplog):
    """A claim the claim thread made as the split began (on either side) is sent by no one:
    it is claimed again once it expires."""
    make_messages(2)
    relay = Relay(instance_id="r1")
    try:
        relay._ensure_session()
        with other_session() as session, session.cursor() as cursor:
            live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
        Split(relay)
        with caplog.at_level(logging.WARNING, logger="django_dsched"):
            relay._took(Taken(Claimed(live, []), 10, time.monotonic(), relay.pin.generation))
        assert relay.dispatch.held == {} and relay.stats.claimed == 0
        assert "not sending 2 message(s) claimed as a split brain was seen" in caplog.text
    finally:
        relay.shutdown()


def test_a_new_session_lost_while_it_is_set_up_is_not_used_unchecked(relay_settings):
    """on_new_session's statements lost the session: the step starts again on a session
    checked as the first was, not on one a cursor opened behind the loop's back."""
    relay = Relay(instance_id="r1")
    renew = relay.on_new_session
    lost = []

    def lose_it_once():
        renew()
        if not lost:
            lost.append(True)
            connections[relay.using].close()

    relay.on_new_session = lose_it_once
    try:
        relay._guarded(relay.step)
        assert lost and not relay.connected and relay.pin.server is None
        relay._guarded(relay.step)
        assert relay.connected and relay.pin.server == identify(connection)
    finally:
        relay.shutdown()
