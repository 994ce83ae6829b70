"""Concurrent delivery in one relay: the limits hold, a slow destination holds only its own
messages, and every message held is claimed, renewed and settled once under the relay's
fence."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox import claiming
from django_dsched.outbox.claims import claim
from django_dsched.outbox.relay import Relay
from tests.helpers import other_session, sql, wait_for
from tests.outbox_helpers import make_messages, statuses

pytestmark = pytest.mark.django_db(transaction=True)

TENANT_A = uuid.UUID(int=0xA)
TENANT_B = uuid.UUID(int=0xB)


class Gauge:
    """How many calls run at once, and the most that ever did; calls wait on ``gate``."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.done: list[str] = []
        self.gate = threading.Event()

    def __call__(self, event: dict) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            self.gate.wait(self.timeout)
        finally:
            with self.lock:
                self.now -= 1
                self.done.append(event["id"])


@contextmanager
def running(relay: Relay) -> Iterator[threading.Thread]:
    """``relay.run()`` on a thread while the block runs; stopped after it."""
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        relay.stop()
        thread.join(30)


@contextmanager
def hanging_endpoint() -> Iterator[tuple[str, threading.Event, list[str]]]:
    """A local webhook endpoint whose every request waits until ``release`` is set (or 8 s);
    its base URL, the event, and the Idempotency-Keys it received."""
    release = threading.Event()
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append(self.headers["Idempotency-Key"])
            release.wait(8)
            self.send_response(204)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", release, received
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_destination_s_concurrency_bounds_its_sends(relay_settings, handle):
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "CONCURRENCY": 3}}
    gauge = handle(Gauge(), topic="reports")
    make_messages(10)
    relay = Relay(instance_id="r1")
    with running(relay):
        wait_for(lambda: gauge.now == 3, what="three sends under way")
        time.sleep(0.2)  # no fourth starts
        assert gauge.most == 3
        gauge.gate.set()
        wait_for(lambda: statuses() == {DeliveryStatus.DELIVERED: 10}, what="all delivered")
    assert gauge.most == 3


def test_a_relay_s_and_a_host_s_concurrency_bound_all_its_sends(relay_settings, handle):
    relay_settings.DSCHED_TRANSPORTS = {
        "reports": {"BACKEND": "handlers", "CONCURRENCY": 8, "HOSTS": "*"},
        "audit": {"BACKEND": "handlers", "CONCURRENCY": 8, "HOSTS": "*"},
    }
    gauge = Gauge()
    handle(gauge, topic="reports", hosts="*")
    handle(gauge, topic="audit", hosts="*")
    for topic in ("reports", "audit"):
        make_messages(6, topic=topic, host_id=TENANT_A)
    # One host, two routes of eight: the host's limit, 5.
    relay = Relay(instance_id="r1", concurrency=50, host_concurrency=5)
    with running(relay):
        wait_for(lambda: gauge.now == 5, what="five sends under way")
        time.sleep(0.2)
        assert gauge.most == 5
        gauge.gate.set()
        wait_for(lambda: statuses() == {DeliveryStatus.DELIVERED: 12}, what="all delivered")
    # Two hosts: the relay's limit, 4.
    gauge.gate.clear()
    gauge.most = 0
    for host in (TENANT_A, TENANT_B):
        make_messages(6, host_id=host)
    relay = Relay(instance_id="r2", concurrency=4, host_concurrency=5)
    with running(relay):
        wait_for(lambda: gauge.now == 4, what="four sends under way")
        time.sleep(0.2)
        assert gauge.most == 4
        gauge.gate.set()
        wait_for(lambda: statuses() == {DeliveryStatus.DELIVERED: 24}, what="all delivered")


def test_a_slow_destination_does_not_hold_a_fast_one(relay_settings, handle, settings):
    """Tenant A's webhook hangs; tenant B's handler is fast: B's messages are delivered while
    A's sends hang, by the same relay, and A's are delivered once its endpoint answers."""
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="b", hosts="*")
    with hanging_endpoint() as (url, release, received):
        settings.DSCHED_TRANSPORTS = {"b": {"BACKEND": "handlers", "HOSTS": "*"}}
        settings.DSCHED_TRANSPORTS_BY_HOST = {
            str(TENANT_A): {"a": {"BACKEND": "webhook", "CONCURRENCY": 2, "OPTIONS": {"URL": url}}}
        }
        slow = make_messages(4, topic="a", host_id=TENANT_A)
        relay = Relay(instance_id="r1")
        with running(relay):
            wait_for(lambda: len(received) == 2, what="A's two sends under way")
            fast = make_messages(20, topic="b", host_id=TENANT_B)
            wait_for(lambda: len(seen) == 20, what="B's messages delivered while A's hang")
            wait_for(
                lambda: (
                    OutboxMessage.objects.filter(
                        id__in=fast, status=DeliveryStatus.DELIVERED
                    ).count()
                    == 20
                ),
                what="B's outcomes recorded",
            )
            assert len(received) == 2  # A's limit: its other two wait, claimed
            assert not OutboxMessage.objects.filter(id__in=slow, status="DELIVERED").exists()
            release.set()
            wait_for(lambda: statuses() == {DeliveryStatus.DELIVERED: 24}, what="A's too")
    assert sorted(received) == sorted(str(i) for i in slow)


def test_the_heartbeat_keeps_every_message_held_queued_and_in_flight(relay_settings, handle):
    """Messages queued behind a long send stay claimed past the visibility timeout: another
    relay claims none of them, and each is delivered once."""
    relay_settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 1.0
    gauge = handle(Gauge(), topic="reports")  # concurrency 1: one sends, five wait
    ids = make_messages(6)
    relay = Relay(instance_id="r1")
    with running(relay):
        wait_for(lambda: gauge.now == 1, what="the first send under way")
        time.sleep(2.5)  # two and a half visibility timeouts
        assert Relay(instance_id="thief").run_until_idle() == 0
        gauge.gate.set()
        wait_for(lambda: statuses() == {DeliveryStatus.DELIVERED: 6}, what="all delivered")
    assert sorted(gauge.done) == sorted(str(i) for i in ids)
    assert OutboxMessage.objects.filter(attempts=1).count() == 6


def test_a_relay_killed_mid_flight_loses_nothing(relay_settings, handle):
    """A relay dies with several sends under way and messages waiting behind them (its
    heartbeat stops, nothing is settled or given back): once its claims expire another relay
    delivers every one, with the same ids; only those the dead relay had under way are sent
    twice, and its late outcomes are not recorded."""
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "CONCURRENCY": 3}}
    gauge = handle(Gauge(), topic="reports")
    ids = make_messages(7)
    dead = Relay(instance_id="dead")
    # It claims the seven: three go out at once, four wait behind them.
    wait_for(lambda: dead.step() >= 0 and gauge.now == 3, what="three sends under way")
    # The process dies: nothing more runs on its thread, its heartbeat stops, no send starts.
    dead.heartbeat.stop()
    dead.dispatch.stopping.set()
    claimed = OutboxMessage.objects.filter(claimed_by="dead").values_list("id", flat=True)
    assert set(claimed) == set(ids)
    sql("UPDATE outbox_message_t SET claimed_until = clock_timestamp() - interval '1 second'")
    gauge.gate.set()  # the dead relay's sends return: their outcomes are never recorded
    assert Relay(instance_id="r2").run_until_idle() == 7
    rows = OutboxMessage.objects.all()
    assert {r.id for r in rows if r.status == DeliveryStatus.DELIVERED} == set(ids)
    assert all(r.attempts == 2 and r.claimed_by == "" for r in rows)  # recorded once
    # The three the dead relay had under way, twice; no other.
    wait_for(lambda: len(gauge.done) == len(ids) + 3, what="the dead relay's sends to return")
    assert sorted(set(gauge.done)) == sorted(str(i) for i in ids)
    dead.dispatch.close()
    dead.claiming.close()  # its claim thread's session


def test_messages_claimed_while_earlier_ones_are_sent_are_delivered_once(relay_settings, handle):
    """A relay claims its next batch while it sends one: 300 messages, batches of 20, each
    delivered once, in order within its destination."""
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="reports")
    ids = make_messages(300)
    relay = Relay(instance_id="r1", batch_size=20)
    assert relay.run_until_idle() == 300
    assert seen == [str(i) for i in ids]
    assert relay.stats.batches >= 15


def test_a_failing_destination_is_held_back_and_its_messages_kept(relay_settings, handle):
    """Tenant A's handler fails every send: after three in a row its circuit opens. A's other
    messages are given back until it ends, their attempt not counted; the circuit shows in
    relay_circuit_t (the cluster page, dsched cluster); B's messages go on. Once A's handler
    works again, the circuit's probe goes through, it closes, and everything is delivered."""
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
    relay_settings.DSCHED_RELAY_CIRCUIT_FAILURES = 3
    relay_settings.DSCHED_RELAY_CIRCUIT_SECONDS = 1.0
    relay_settings.DSCHED_RELAY_MAX_ATTEMPTS = 10
    broken = threading.Event()
    broken.set()
    seen: list[str] = []

    def a(event: dict) -> None:
        if broken.is_set():
            raise ConnectionError("A's service is down")
        seen.append(event["id"])

    handle(a, topic="a", hosts="*")
    handle(lambda event: seen.append(event["id"]), topic="b", hosts="*")
    a_ids = make_messages(10, topic="a", host_id=TENANT_A)
    relay = Relay(instance_id="r1")
    with running(relay):
        wait_for(
            lambda: (
                sql("SELECT state, failures FROM relay_circuit_t WHERE relay_id = 'r1'")
                == [("open", 3)]
            ),
            what="A's circuit open",
        )
        b_ids = make_messages(5, topic="b", host_id=TENANT_B)
        wait_for(
            lambda: OutboxMessage.objects.filter(id__in=b_ids, status="DELIVERED").count() == 5,
            what="B's messages delivered while A's circuit is open",
        )
        rows = list(OutboxMessage.objects.filter(id__in=a_ids))
        assert all(r.status == DeliveryStatus.PENDING for r in rows)  # kept, not dead
        # Three sends failed in a row: three messages once each, or (on a slow machine, its
        # retry due after about a second) a message's retry among them.
        failed = [r for r in rows if r.attempts]
        held = [r for r in rows if not r.attempts]
        assert sum(r.attempts for r in failed) == 3 and 2 <= len(failed) <= 3
        assert len(held) == 10 - len(failed)  # never attempted
        assert all(r.last_error.startswith("circuit open:") for r in held)
        assert all(r.next_attempt_ts is not None for r in held)
        ((route, host, error),) = sql("SELECT route, host, last_error FROM relay_circuit_t")
        assert route == "DSCHED_TRANSPORTS['*']" and host == str(TENANT_A)
        assert "A's service is down" in error
        broken.clear()
        wait_for(
            lambda: statuses() == {DeliveryStatus.DELIVERED: 15}, timeout=30, what="all delivered"
        )
        wait_for(lambda: not sql("SELECT 1 FROM relay_circuit_t"), what="the circuit closed")
    assert sorted(seen) == sorted(str(i) for i in a_ids + b_ids)
    # The held messages were attempted once (when delivered), the failed ones once more.
    attempts = dict(OutboxMessage.objects.filter(id__in=a_ids).values_list("id", "attempts"))
    assert all(attempts[r.id] == 1 for r in held)
    assert all(attempts[r.id] == r.attempts + 1 for r in failed)


def test_one_tenant_s_backlog_does_not_hold_up_another_s_deliveries(relay_settings, handle):
    """A's 400 messages and B's 20 wait (both backlog, A's older): each batch takes both
    hosts' oldest, half the batch each at most, so B's are delivered in the first batch, not
    after A's drain."""
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="reports", hosts="*")
    a_ids = make_messages(400, host_id=TENANT_A, age=600)
    b_ids = make_messages(20, host_id=TENANT_B, age=60)
    relay = Relay(instance_id="r1", batch_size=50)
    try:
        relay.step()
        relay.drain()
        assert {str(i) for i in b_ids} <= set(seen)  # all of B's in the first batch
        assert [i for i in seen if i not in {str(b) for b in b_ids}] == [str(i) for i in a_ids[:25]]
    finally:
        relay.shutdown()


def test_the_hosts_turn_in_a_backlog_moves_at_every_claim(relay_settings, handle):
    """Four tenants with a backlog and batches of two (a host each, two at a time): the turn
    moves by one a claim, so in four claims every tenant gets two deliveries, not the first
    two tenants all of them."""
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
    seen: list[str] = []
    handle(lambda event: seen.append(event["source"]), topic="reports", hosts="*")
    hosts = [uuid.UUID(int=0xA0 + n) for n in range(4)]
    for host in hosts:
        make_messages(5, host_id=host, age=600)
    relay = Relay(instance_id="r1", batch_size=2)
    try:
        for _ in range(4):
            relay.step()
            relay.drain()
        counts = {host: sum(source.endswith(str(host)) for source in seen) for host in hosts}
        assert list(counts.values()) == [2, 2, 2, 2], counts
    finally:
        relay.shutdown()


def test_a_relay_holds_a_message_claimed_twice_under_one_token_once(relay_settings, handle):
    """The same claim handed to the sends twice (a claim made on a server the relay's
    session left, and its rows claimed again on the new one with the same token) is sent
    once."""
    seen: list[str] = []
    handle(lambda event: seen.append(event["id"]), topic="reports")
    ids = make_messages(5)
    relay = Relay(instance_id="r1")
    try:
        with other_session() as session, session.cursor() as cursor:
            live, _ = claim(cursor, relay.claimer, 10)
        relay.dispatch.add(live)
        relay.dispatch.add(live)
        assert len(relay.dispatch.held) == 5
        relay.drain()
        assert sorted(seen) == sorted(str(i) for i in ids)
    finally:
        relay.shutdown()


def claims_waiting() -> int:
    """Sessions whose claim waits for a lock (the only statement of the relay's that starts
    so and waits on the table lock below: the others that do are reads)."""
    return sql(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE '%%RECURSIVE levels(priority)%%'"
    )[0][0]


@contextmanager
def outbox_locked() -> Iterator[Callable[[], object]]:
    """Another session holds ``outbox_message_t`` in SHARE mode, so claims wait (reads do
    not), until the block ends or it calls the function it is given."""
    with other_session() as blocker, blocker.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("LOCK TABLE outbox_message_t IN SHARE MODE")
        yield lambda: cursor.execute("ROLLBACK")


def test_a_relay_runs_two_claims_at_once_and_holds_three_batches_at_most(relay_settings, handle):
    """A relay holding a batch of a backlog starts two more claims, each on a claim thread and
    session of its own, running at once; with what they bring it holds three batches
    (claimed, being claimed or not recorded yet), and claims no more until some are recorded.
    Each message is then delivered once."""
    gauge = handle(Gauge(), topic="reports")  # no send returns until its gate opens
    ids = make_messages(100, age=60)  # a backlog: the relay is behind
    relay = Relay(instance_id="r1", batch_size=10)
    try:
        relay.step()  # nothing held: a claim on the relay's own session
        assert len(relay.dispatch.held) == 10
        with outbox_locked() as release:  # claims wait
            relay.step()
            relay.step()
            wait_for(lambda: claims_waiting() == 2, what="two claims waiting at once")
            relay.step()  # no room: no third
            assert relay.claiming.asked() == (20, 2 * relay.batch_bytes)
            release()
        wait_for(lambda: relay.step() >= 0 and len(relay.dispatch.held) == 30, what="3 batches")
        assert not relay.claiming.running
        relay.step()
        assert not relay.claiming.running and len(relay.dispatch.held) == 30
        assert OutboxMessage.objects.filter(claimed_by="r1").count() == 30
        gauge.gate.set()
        relay.drain()
        while relay.run_until_idle():
            pass
        assert statuses() == {DeliveryStatus.DELIVERED: 100}
        assert sorted(gauge.done) == sorted(str(i) for i in ids)
        assert OutboxMessage.objects.filter(attempts=1).count() == 100
    finally:
        gauge.gate.set()
        relay.shutdown()


def test_a_relay_stopping_gives_back_what_two_claims_in_flight_and_its_sends_left(
    relay_settings, handle
):
    """Stopping waits for both claims in flight and gives their messages back (claimable at
    once by another relay), with those it had queued and the rest of a run whose first send
    was under way."""
    gauge = handle(Gauge(), topic="reports")
    gauge.gate.set()
    relay_settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "CONCURRENCY": 1}}
    make_messages(60, age=60)  # a backlog: two claims at once
    relay = Relay(instance_id="r1", batch_size=10)
    with other_session() as blocker, blocker.cursor() as cursor:
        gauge.gate.clear()  # the first send holds the rest of its batch queued
        relay.step()
        cursor.execute("BEGIN")
        cursor.execute("LOCK TABLE outbox_message_t IN SHARE MODE")
        relay.step()
        relay.step()
        wait_for(lambda: claims_waiting() == 2, what="two claims waiting at once")
        stopping = threading.Thread(target=relay.shutdown)
        stopping.start()
        wait_for(lambda: relay.dispatch._closed, what="the relay stopping")  # it waits on them
        cursor.execute("ROLLBACK")
    gauge.gate.set()
    stopping.join(30)
    assert not stopping.is_alive()
    rows = OutboxMessage.objects.exclude(status=DeliveryStatus.DELIVERED)
    assert all(r.claimed_by == "" and r.claimed_until is None for r in rows)
    assert Relay(instance_id="r2").run_until_idle() == rows.count()
    assert statuses() == {DeliveryStatus.DELIVERED: 60}


def test_no_claim_starts_beside_one_begun_before_the_relays_session_moved(relay_settings, handle):
    """A claim in flight began on the relay's previous session: no other claim starts until
    it is taken (and renewed, or dropped, on the new session), so a claim on the new server
    never takes the rows the old one did under the same token while both are in flight."""
    gauge = handle(Gauge(), topic="reports")  # nothing is recorded while the table is locked
    make_messages(40)
    relay = Relay(instance_id="r1", batch_size=10)
    try:
        relay.step()  # 10 held
        with outbox_locked() as release:
            relay.step()  # a claim on a claim thread, waiting
            wait_for(lambda: claims_waiting() == 1, what="a claim waiting")
            relay.pin.set("elsewhere", "elsewhere:5432")  # its session moved: a generation
            assert not relay.claiming.free(relay.pin.generation)
            release()
        wait_for(lambda: relay.step() >= 0 and not relay.claiming.running, what="it is taken")
        assert relay.claiming.free(relay.pin.generation)
    finally:
        gauge.gate.set()
        relay.shutdown()


def test_while_a_claim_runs_only_a_full_claim_or_news_start_another(relay_settings, handle):
    """With a claim in flight, a due poll or a claim that found rows does not start a
    second claim (the one in flight looks for them): only a full last claim, a NOTIFY since
    it began, or a destination with room again does, while the relay is behind."""
    gauge = handle(Gauge(), topic="reports")  # nothing is recorded while the table is locked
    make_messages(40, age=60)  # a backlog
    relay = Relay(instance_id="r1", batch_size=10)
    try:
        relay.step()
        assert relay._behind
        with outbox_locked() as release:
            relay.step()
            wait_for(lambda: claims_waiting() == 1, what="a claim waiting")
            relay._claim_full, relay._claim_at = False, 0.0  # a poll is due
            assert not relay._claim_wanted()
            relay._notifications -= 1  # a NOTIFY came since it began
            assert relay._claim_wanted()
            release()
    finally:
        gauge.gate.set()
        relay.shutdown()


def test_a_relay_keeping_up_claims_one_batch_at_a_time(relay_settings, handle, monkeypatch):
    """A relay whose last claim took only messages claimable for less than ``BEHIND_AFTER``
    keeps up: beside its claim in flight neither a full last claim nor a NOTIFY starts a
    second (two claims at once would take the database's CPU from the fires it keeps up
    with). A claim in flight for longer than that leaves it behind, and so does a claim that
    takes a message that waited longer (a backlog): two claims run at once then
    (test_a_relay_runs_two_claims_at_once_...)."""
    # Behind only past 30 s here, so that a slow run never finds these messages late.
    monkeypatch.setattr(claiming, "BEHIND_AFTER", 30.0)
    gauge = handle(Gauge(), topic="reports")  # nothing is recorded while the table is locked
    make_messages(20)  # just fired
    relay = Relay(instance_id="r1", batch_size=10)
    try:
        relay.step()  # on its own session
        assert len(relay.dispatch.held) == 10 and relay._claim_full and not relay._behind
        with outbox_locked() as release:
            relay.step()  # a claim on a claim thread, waiting
            wait_for(lambda: claims_waiting() == 1, what="a claim waiting")
            relay._notifications -= 1  # a NOTIFY came since it began
            relay.step()
            assert relay.claiming.asked() == (10, relay.batch_bytes)  # no second claim
            release()
        relay._take_claim(wait=30)
        assert len(relay.dispatch.held) == 20 and relay._claim_full and not relay._behind
        wait_for(lambda: relay.step() >= 0 and not relay.claiming.running, what="all taken")
        # A claim in flight longer than BEHIND_AFTER leaves the relay behind.
        monkeypatch.setattr(claiming, "BEHIND_AFTER", 0.5)
        relay._claim_full = True
        with outbox_locked() as release:
            relay.claiming.start(1, relay.batch_bytes, None, [], 0, relay.pin.generation)
            wait_for(lambda: claims_waiting() == 1, what="a claim waiting")
            assert not relay._claim_wanted()
            assert relay._sleep() <= 0.5  # it looks again once the claim has run that long
            wait_for(lambda: relay._claim_wanted(), timeout=5, what="the claim to run long")
            release()
        wait_for(lambda: relay.step() >= 0 and not relay.claiming.running, what="it is taken")
        monkeypatch.setattr(claiming, "BEHIND_AFTER", 30.0)
        # A backlog appears, another tenant's (the relay holds enough of the first's).
        make_messages(30, age=60, host_id=TENANT_B)
        relay._claim_at = 0.0  # the poll is due (no NOTIFY came)
        relay.step()  # claims a batch of it (and holds three batches)
        wait_for(lambda: relay.step() >= 0 and not relay.claiming.running, what="it is taken")
        assert relay._behind
    finally:
        gauge.gate.set()
        relay.shutdown()


def test_a_relay_waiting_on_its_claims_or_for_room_sleeps(relay_settings, handle):
    """A poll that falls due while claims run, or while the relay has no batch's room, does
    not make the relay's loop spin: it sleeps until a claim ends (which wakes it) or an
    outcome is due to be recorded (which makes room)."""
    gauge = handle(Gauge(timeout=60), topic="reports")  # no outcome comes to be recorded
    make_messages(60, age=60)  # a backlog: two claims at once
    relay = Relay(instance_id="r1", batch_size=10)
    relay.poll_interval = 5.0
    try:
        relay.step()
        with outbox_locked() as release:
            relay.step()
            relay.step()
            wait_for(lambda: claims_waiting() == 2, what="two claims waiting")
            relay._claim_full, relay._claim_at = False, 0.0  # a poll is due
            assert relay._sleep() > 1.0
            relay.waker.wait(0)  # no wake-up pending: the one below is the claims'
            woken = threading.Thread(target=relay.waker.wait, args=(30.0,))
            woken.start()
            release()
        woken.join(20)
        assert not woken.is_alive(), "a claim's end did not wake the relay"
        wait_for(lambda: relay.step() >= 0 and not relay.claiming.running, what="both taken")
        assert len(relay.dispatch.held) == 30
        relay._claim_full, relay._claim_at = False, 0.0  # due, with no room
        assert relay._room() is None and relay._sleep() > 1.0
    finally:
        gauge.gate.set()
        relay.shutdown()
