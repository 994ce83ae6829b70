"""Split brain: two different servers of the URL accepting writes stop the fires (a real
old primary coming back writable: tests/integration/test_failover.py)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from django_dsched.models import Event
from django_dsched.outbox.relay import Relay
from django_dsched.runtime.split_brain import (
    PROBE_SECONDS,
    HostWatch,
    Server,
    listed_hosts,
    probe,
    split_of,
)
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import wait_for
from tests.tcp_proxy import TcpProxy

A = Server(7, 1, "2026-01-01 00:00:00+00")
B = Server(7, 2, "2026-01-01 00:05:00+00")  # the promoted standby: same cluster, new timeline


def test_the_hosts_of_a_multi_host_url():
    assert listed_hosts({"host": "a,b", "port": "5432,5433"}) == [("a", "5432"), ("b", "5433")]
    assert listed_hosts({"host": "a,b", "port": "5432"}) == [("a", "5432"), ("b", "5432")]
    assert listed_hosts({"host": "a", "port": ""}) == [("a", "")]
    assert listed_hosts({"host": "a,b,c", "port": "1,2"}) == []  # libpq refuses it too


def test_two_writable_servers_are_a_split_one_server_behind_two_hosts_is_not():
    assert split_of({}) is None
    assert split_of({"a:1": A}) is None
    assert split_of({"pooler1:6432": A, "pooler2:6432": A}) is None
    split = split_of({"a:1": A, "b:2": B})
    assert split is not None
    assert "a:1 (timeline 1" in split and "b:2 (timeline 2" in split


def test_the_watch_says_when_a_split_starts_and_ends(caplog):
    seen = {"a": A, "b": None}
    watch = HostWatch(
        {"host": "a,b", "port": "1,2"}, 1.0, "scheduler instance=x",
        prober=lambda params, host, port, timeout: seen[host],
    )  # fmt: skip
    assert watch.needed
    with caplog.at_level(logging.WARNING, logger="django_dsched"):
        assert watch.check() is None
        seen["b"] = B
        assert watch.check() is not None
        assert watch.check() is not None  # said once
        seen["a"] = None
        assert watch.check() is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("two hosts of the database URL accept writes (split brain)")
    assert messages[1].startswith("only one host of the database URL accepts writes again")


@pytest.mark.django_db
def test_a_probe_reads_the_server_it_reaches():
    params = connection.get_connection_params()
    host, port = listed_hosts(params)[0]
    server = probe(params, host, port or "5432", 2.0)
    assert server is not None and server.timeline >= 1
    assert probe({**params, "port": "1"}, "127.0.0.1", "1", 2.0) is None


SPLIT = split_of({"a:1": A, "b:2": B})
NOT_READY = (False, f"two hosts of the database URL accept writes: {SPLIT}")


class Split:
    """Two hosts of a loop's URL, a and b, both accepting writes until :meth:`end` (b is a
    standby from then on): :attr:`watch` is the loop's watch of them."""

    def __init__(self, loop, *, seen: bool = True) -> None:
        self.on = True
        self.watch = HostWatch({"host": "a,b", "port": "1,2"}, 60.0, "x", prober=self.probe)
        if seen:  # else the loop's own first look at the hosts sees it
            self.watch.split = SPLIT
        loop.hosts = self.watch

    def probe(self, params, host, port, timeout):
        return A if host == "a" else (B if self.on else None)

    def end(self) -> None:
        self.on = False
        self.watch.split = None

    def start(self) -> None:
        self.on = True
        self.watch.split = SPLIT


@pytest.mark.django_db(transaction=True)
def test_a_scheduler_fires_nothing_while_two_hosts_accept_writes(db_now):
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    scheduler = Scheduler(instance_id="split")
    split = Split(scheduler)
    try:
        scheduler._guarded(scheduler.step)
        assert not scheduler.lease.is_leader and Event.objects.count() == 0
        assert scheduler.readiness() == NOT_READY
        split.end()
        scheduler._guarded(scheduler.step)
        assert scheduler.lease.is_leader and Event.objects.count() == 1
        # A split seen while leading: the lease is given up at once.
        split.start()
        scheduler._guarded(scheduler.step)
        assert not scheduler.lease.is_leader
    finally:
        scheduler.shutdown()


@pytest.mark.django_db(transaction=True)
def test_a_relay_waits_out_a_split_with_its_poll_not_a_busy_loop():
    """A relay claims nothing while two hosts accept writes; its poll falling due then does
    not make its loop step again at once (it looks again at its poll interval)."""
    relay = Relay(instance_id="split")
    relay.poll_interval = 5.0
    Split(relay)
    try:
        relay._claim_full, relay._claim_at = False, 0.0  # a poll is due
        assert relay._guarded(relay.step) > 1.0
        assert relay.split_brain() == SPLIT and not relay.dispatch.held
    finally:
        relay.shutdown()


@pytest.mark.django_db(transaction=True)
def test_a_loop_looks_at_the_hosts_before_its_new_session_is_used(db_now):
    """A session reached while two hosts accept writes is on either side: the loop stands by
    from its first statement, not from its watch's next round (a minute away here)."""
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    scheduler = Scheduler(instance_id="split")
    split = Split(scheduler, seen=False)
    try:
        assert scheduler.split_brain() is None
        scheduler._guarded(scheduler.step)
        assert scheduler.split_brain() == SPLIT
        assert not scheduler.lease.is_leader and Event.objects.count() == 0
        # Over, and the next new session sees it over at once.
        split.on = False
        scheduler._lost_connection()
        scheduler._guarded(scheduler.step)
        assert scheduler.lease.is_leader and Event.objects.count() == 1
    finally:
        scheduler.shutdown()


class SilentAfterLogin(TcpProxy):
    """A server that lets a client log in, then answers nothing more: a frozen PostgreSQL
    (SIGSTOP) whose kernel still takes the bytes, or a pooler out of server connections."""

    def _answer(self, source: socket.socket, sink: socket.socket) -> None:
        """Pass the server's bytes on up to its first ReadyForQuery, then nothing."""
        seen = b""
        while READY not in seen:
            data = source.recv(65536)
            if not data:
                return
            at = (seen[-len(READY) :] + data).find(READY)
            seen = seen[-len(READY) :] + data
            if at >= 0:
                data = data[: max(0, at + len(READY) - (len(seen) - len(data)))]
            sink.sendall(data)
        while source.recv(65536):
            pass


READY = b"Z\x00\x00\x00\x05I"  # ReadyForQuery, idle


@pytest.mark.django_db
def test_a_host_that_logs_in_and_answers_nothing_is_not_waited_for():
    """A round waits for a host at most PROBE_SECONDS (no socket timeout covers a server
    that took the query and never answers), and a host whose probe still runs is not
    probed again: one thread for it, not one a round. The other host's answer counts."""
    params = connection.get_connection_params()
    host, port = listed_hosts(params)[0]
    port = port or "5432"
    target = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, int(port))
    silent = SilentAfterLogin(target).start()
    try:
        here = probe(params, host, port, 2.0)
        watch = HostWatch(
            {**params, "host": f"{host},127.0.0.1", "port": f"{port},{silent.port}"}, 60.0, "x"
        )
        rounds: list[float] = []

        def two_rounds():
            for _ in range(2):
                began = time.monotonic()
                watch.check()
                rounds.append(time.monotonic() - began)

        worker = threading.Thread(target=two_rounds, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "a round waited for the silent host"
        assert rounds[0] < PROBE_SECONDS + 5 and rounds[1] < 5, rounds
        name = f"dsched-probe:127.0.0.1:{silent.port}"
        assert [t.name for t in threading.enumerate()].count(name) == 1
        assert here is not None and watch.split is None
    finally:
        silent.stop()


def test_the_loops_own_server_counts_even_when_its_probe_fails():
    """The loop's session is on a (it was just asked): a failed probe of a, or none at all,
    cannot hide that b accepts writes too."""
    watch = HostWatch(
        {"host": "a,b", "port": "1,2"}, 60.0, "x",
        prober=lambda params, host, port, timeout: None if host == "a" else B,
    )  # fmt: skip
    assert watch.check() is None
    assert watch.check(own=("a:1", A)) == SPLIT


def test_a_split_ends_on_an_answer_not_on_a_probe_that_hangs():
    """Once two hosts are seen accepting writes, a host whose probe does not answer keeps
    its last answer (the loop on the other side must not fire on a slow probe); the split
    ends when the host answers that it does not accept writes. The loop's own host is
    counted from its session when the session starts, and probed in the rounds after."""
    answers: dict[str, object] = {"b": B}
    hang = threading.Event()

    def prober(params, host, port, timeout):
        if host == "a":
            return A
        if answers["b"] == "hang":
            hang.wait(30)
            return None
        return answers["b"]

    watch = HostWatch({"host": "a,b"}, 60.0, "x", prober=prober)
    split = SPLIT.replace("a:1", "a:5432").replace("b:2", "b:5432")
    try:
        assert watch.check(own=("a:5432", A)) == split
        answers["b"] = "hang"
        assert watch.check() == split  # no answer: still split
        assert watch.check() == split  # its probe still runs: still split
        answers["b"] = None
        hang.set()
        wait_for(lambda: watch.check() is None, timeout=10, what="the split's end")
    finally:
        hang.set()


def test_outside_a_split_a_host_that_does_not_answer_accepts_no_writes():
    """A frozen old primary, then the standby promoted: no split is seen from an unanswered
    probe, so the promoted side fires."""
    hang = threading.Event()
    watch = HostWatch(
        {"host": "a,b"}, 60.0, "x", prober=lambda params, host, port, timeout: hang.wait(30)
    )
    try:
        assert watch.check(own=("a:5432", A)) is None
    finally:
        hang.set()
