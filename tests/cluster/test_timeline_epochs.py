"""Epochs fold in the server's timeline, and every fire records its timeline.

A real promotion is tested in tests/integration/test_failover.py (Patroni); here the fold's
arithmetic is driven on one server by standing a parameter in for the timeline function.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_dsched import api
from django_dsched.cluster import lease as lease_sql
from django_dsched.cluster.bucket_count import agree_bucket_count
from django_dsched.cluster.buckets import lock_id
from django_dsched.cluster.lease import TIMELINE, BucketLeases, LeaseHolder
from django_dsched.models import Event
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.helpers import other_session, sql

pytestmark = pytest.mark.django_db(transaction=True)

SPAN = 1 << 32  # epochs per timeline


ORIGINAL = {name: getattr(lease_sql, name) for name in ("ACQUIRE", "ACQUIRE_MANY")}


def on_timeline(monkeypatch, timeline: int) -> None:
    """The lease statements read ``timeline`` instead of the server's."""
    for name, statement in ORIGINAL.items():
        assert TIMELINE in statement
        monkeypatch.setattr(lease_sql, name, statement.replace(TIMELINE, f"{timeline}::bigint"))


def expire() -> None:
    sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '1 hour'")


def test_the_timeline_expression_reads_the_servers_timeline():
    (timeline,) = sql(f"SELECT {TIMELINE}")[0]
    checkpoint = sql("SELECT timeline_id FROM pg_control_checkpoint()")[0][0]
    assert timeline == checkpoint >= 1


def test_a_lease_taken_on_a_later_timeline_gets_an_epoch_above_every_earlier_one(monkeypatch):
    with other_session() as s1, other_session() as s2:
        a = LeaseHolder(s1, lease_id=1, instance_id="a", lease_seconds=30, fast_failover=False)
        b = LeaseHolder(s2, lease_id=1, instance_id="b", lease_seconds=30, fast_failover=False)
        on_timeline(monkeypatch, 1)
        assert a.try_acquire() and a.epoch == 1  # timeline 1: epochs as they always were
        expire()
        assert b.try_acquire() and b.epoch == 2
        # The standby was promoted (timeline 3, say: a second failover): the first take jumps
        # past every epoch timelines 1 and 2 can have handed out, the next ones count on.
        on_timeline(monkeypatch, 3)
        expire()
        assert a.try_acquire() and a.epoch == 2 * SPAN + 1
        expire()
        assert b.try_acquire() and b.epoch == 2 * SPAN + 2
        # Epochs never go back, whatever timeline a statement reads.
        on_timeline(monkeypatch, 1)
        expire()
        assert a.try_acquire() and a.epoch == 2 * SPAN + 3


def test_the_first_lease_of_a_database_on_a_later_timeline_starts_above_it(monkeypatch):
    on_timeline(monkeypatch, 2)
    with other_session() as s1:
        a = LeaseHolder(s1, lease_id=1, instance_id="a", lease_seconds=30, fast_failover=False)
        assert a.try_acquire() and a.epoch == SPAN + 1


def test_bucket_epochs_fold_the_timeline_per_bucket(monkeypatch):
    agree_bucket_count(connection, base=1, count=4, lease_seconds=30)
    with other_session() as s1:
        leases = BucketLeases(
            s1, base=1, count=4, replicas=1, instance_id="a", lease_seconds=30,
            fast_failover=False,
        )  # fmt: skip
        on_timeline(monkeypatch, 1)
        assert leases.acquire([0, 1, 2, 3], []) == [0, 1, 2, 3]
        assert leases.held == {0: 1, 1: 1, 2: 1, 3: 1}
        leases.release_some([2])
        assert leases.acquire([2], []) == [2]
        assert leases.held[2] == 2
        leases.release_some([0, 2])
        on_timeline(monkeypatch, 2)
        assert leases.acquire([0, 2], []) == [0, 2]
        assert (leases.held[0], leases.held[2]) == (SPAN + 1, SPAN + 1)
        epochs = dict(sql("SELECT lock_id, epoch FROM scheduler_lock_t"))
        assert epochs[lock_id(1, 1)] == 1 and epochs[lock_id(1, 2)] == SPAN + 1


def test_every_fire_records_the_timeline_in_its_metadata(fence, db_now):
    (timeline,) = sql(f"SELECT {TIMELINE}")[0]
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    assert fire(fence).fired == 1
    api.trigger(schedule)
    metadata = [e.metadata for e in Event.objects.filter(scheduled_ts__isnull=False)]
    assert len(metadata) == 2
    assert {m["trigger"] for m in metadata} == {"schedule", "manual"}
    assert all(m["timeline"] == timeline for m in metadata), metadata
