"""Split brain: two different servers of the URL accepting writes stop the fires (a real
old primary coming back writable: tests/integration/test_failover.py)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.db import connection

from django_dsched.models import Event
from django_dsched.runtime.split_brain import HostWatch, Server, listed_hosts, probe, split_of
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory

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


SPLIT = "a:1 (timeline 1, …); b:2 (timeline 2, …)"
NOT_READY = (False, f"two hosts of the database URL accept writes: {SPLIT}")


def split_seen(loop) -> HostWatch:
    """``loop`` sees two hosts of its URL accept writes (its watch's split, set by hand);
    the watch, to end the split with ``watch.split = None``."""
    watch = HostWatch({"host": "a,b", "port": "1,2"}, 1.0, "x", prober=lambda *a: None)
    watch.split = SPLIT
    loop.hosts = watch
    return watch


@pytest.mark.django_db(transaction=True)
def test_a_scheduler_fires_nothing_while_two_hosts_accept_writes(db_now):
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    scheduler = Scheduler(instance_id="split")
    watch = split_seen(scheduler)
    try:
        scheduler._guarded(scheduler.step)
        assert not scheduler.lease.is_leader and Event.objects.count() == 0
        assert scheduler.readiness() == NOT_READY
        watch.split = None
        scheduler._guarded(scheduler.step)
        assert scheduler.lease.is_leader and Event.objects.count() == 1
        # A split seen while leading: the lease is given up at once.
        watch.split = "a:1; b:2"
        scheduler._guarded(scheduler.step)
        assert not scheduler.lease.is_leader
    finally:
        scheduler.shutdown()
