"""Buckets against the real database: the bucket key on every insert path, per-bucket
leases, the bucket fence, hand-off and the stored bucket count."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import connection

from django_dsched import api
from django_dsched.cluster.bucket_count import _transaction, agree_bucket_count
from django_dsched.cluster.buckets import LOCK_STRIDE, bucket_of, owned
from django_dsched.cluster.lease import BucketLeases, decide
from django_dsched.exceptions import BucketCountMismatch
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.models import Event, Lease, Schedule
from django_dsched.models.schedule import BUCKET_KEY_BITS
from django_dsched.scheduler import Scheduler
from django_dsched.scheduler.housekeeping import does_chores
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql

pytestmark = pytest.mark.django_db(transaction=True)

COUNT = 8


def key_of(schedule_id: uuid.UUID) -> int:
    return int.from_bytes(schedule_id.bytes[14:16], "big") & ((1 << BUCKET_KEY_BITS) - 1)


def due(db_now, n=1, **kwargs):
    return ScheduleFactory.create_batch(n, start_ts=db_now() - timedelta(seconds=5), **kwargs)


def leases(wrapper, instance: str, count: int = COUNT, lease: float = 30.0) -> BucketLeases:
    agree_bucket_count(wrapper, base=1, count=count, lease_seconds=lease)
    return BucketLeases(
        wrapper,
        base=1,
        count=count,
        replicas=2,
        instance_id=instance,
        lease_seconds=lease,
        fast_failover=True,
    )


in_transaction = _transaction  # fire_batch needs its caller's transaction


def report(wrapper, instance: str) -> None:
    from django_dsched.cluster import presence

    with wrapper.cursor() as cursor:
        presence.report(cursor, instance, "owner", None, lease_id=1, buckets=COUNT)


def test_the_database_fills_the_bucket_key_on_every_insert_path(db_now):
    made = due(db_now, 3)
    raw_id = uuid.uuid4()
    # A raw INSERT (bulk or hand-written SQL) names no bucket column: the database fills it.
    ((columns,),) = sql(
        "SELECT string_agg(quote_ident(column_name), ', ') FROM information_schema.columns"
        " WHERE table_name = 'schedule_t' AND is_generated = 'NEVER'"
        " AND column_name NOT IN ('schedule_id', 'schedule_name')"
    )
    sql(
        f"INSERT INTO schedule_t (schedule_id, schedule_name, {columns})"
        f" SELECT %s, 'raw', {columns} FROM schedule_t LIMIT 1",
        [raw_id],
    )
    # The API's one-statement insert and its bulk insert leave the column to the database
    # too, and read it back onto the instance they return.
    single = api.create_once(at=db_now() + timedelta(hours=1), topic="t", event_type="e")
    assert single.bucket_key == key_of(single.schedule_id)
    api.bulk_create([api.Once(at=db_now() + timedelta(hours=1), topic="t", event_type="e")] * 2)
    for schedule in Schedule.objects.all():
        assert schedule.bucket_key == key_of(schedule.schedule_id)
    # A key's bucket in Python is the database's (the claim's ``bucket_key & mask``).
    mask = COUNT - 1
    for schedule_id, bucket in sql("SELECT schedule_id, bucket_key & %s FROM schedule_t", [mask]):
        assert bucket == bucket_of(key_of(schedule_id), COUNT)
    assert len(made) + 4 == Schedule.objects.count()
    # A time-ordered id (UUIDv7: the top 48 bits are time) spreads by its random tail.
    seven = [uuid.UUID(int=(0x0190_0000_0000 << 80) | (0x7 << 76) | i * 7919) for i in range(64)]
    assert len({bucket_of(key_of(i), 16) for i in seven}) == 16


def test_one_instance_owns_every_bucket_and_fires_everything(db_now, settings):
    settings.DSCHED_BUCKETS = COUNT
    due(db_now, 120)
    scheduler = Scheduler(instance_id="solo", batch_size=50)
    assert scheduler.run_until_idle() == 120
    assert Event.objects.count() == 120
    rows = Lease.objects.order_by("lease_id")
    assert [r.lease_id for r in rows] == [1 + b * LOCK_STRIDE for b in range(COUNT)]
    assert {r.instance_id for r in rows} == {"solo"}
    assert rows[0].buckets == COUNT
    # Each event carries its bucket's epoch; all leases were released on the way out.
    epochs = {(r.lease_id - 1) // LOCK_STRIDE: r.epoch for r in rows}
    for event in Event.objects.all():
        schedule = Schedule.objects.get(pk=event.aggregate_id)
        assert event.leader_epoch == epochs[schedule.bucket_key % COUNT]
    assert all(r.last_heartbeat.year == 1970 for r in rows)


def test_two_instances_split_the_buckets_by_rendezvous_and_fire_only_their_own(db_now):
    due(db_now, 200)
    with other_session() as s1, other_session() as s2:
        report(s1, "a")
        report(s2, "b")
        a, b = leases(s1, "a"), leases(s2, "b")
        for holder in (a, b):
            view = holder.look()
            decision = decide(view, holder.instance_id, set(holder.held), COUNT, 2)
            holder.acquire(decision.take_as_owner, decision.take_as_standby)
        assert set(a.held) == owned(COUNT, ["a", "b"], "a")
        assert set(b.held) == owned(COUNT, ["a", "b"], "b")
        assert set(a.held) | set(b.held) == set(range(COUNT)) and not set(a.held) & set(b.held)
        for holder, wrapper in ((a, s1), (b, s2)):
            fence = Fence(
                1,
                holder.instance_id,
                0,
                30.0,
                bucket_count=COUNT,
                buckets=tuple(sorted(holder.held)),
                epochs=tuple(holder.held[k] for k in sorted(holder.held)),
            )
            with in_transaction(wrapper) as cursor:
                result = fire_batch(cursor, fence, 1000)
            assert not result.fenced
    fired = sql(
        "SELECT e.metadata->>'instance_id', s.bucket_key FROM event_store_t e"
        " JOIN schedule_t s ON s.schedule_id = e.aggregate_id"
    )
    assert len(fired) == 200
    for instance, key in fired:
        assert owned(COUNT, ["a", "b"], instance) >= {key % COUNT}


def test_a_batch_touching_a_bucket_taken_by_another_instance_is_refused(db_now):
    due(db_now, 50)
    with other_session() as s1, other_session() as s2:
        a = leases(s1, "a")
        assert a.try_acquire() and set(a.held) == set(range(COUNT))
        # Bucket 3's lease expires and "b" takes it (a's view still says it holds it).
        sql("UPDATE scheduler_lock_t SET last_heartbeat = now() - interval '1 hour'"
            " WHERE lock_id = %s", [1 + 3 * LOCK_STRIDE])  # fmt: skip
        b = leases(s2, "b")
        assert b.acquire([], [3]) == [3]
        fence = Fence(
            1, "a", 0, 30.0, bucket_count=COUNT,
            buckets=tuple(range(COUNT)), epochs=tuple(a.held[k] for k in range(COUNT)),
        )  # fmt: skip
        with in_transaction(s1) as cursor:
            result = fire_batch(cursor, fence, 1000)
            assert result.fenced
        assert Event.objects.count() == 0
        # Renewing drops bucket 3 and keeps the rest; a batch on those goes through.
        assert a.renew() and set(a.held) == set(range(COUNT)) - {3}


def test_a_new_owner_gets_its_buckets_by_hand_off_never_two_holders(db_now, settings):
    settings.DSCHED_BUCKETS = COUNT
    first = Scheduler(instance_id="first")
    first.step()
    assert set(first.lease.held) == set(range(COUNT))  # type: ignore[union-attr]
    with other_session() as s2:
        report(s2, "second")
        second = leases(s2, "second")
        # Before the hand-off the new owner can take nothing: the leases are live.
        assert not second.try_acquire()
        first._next_look = 0.0
        first._next_heartbeat = time.monotonic() + 60
        first.step()  # sees "second", releases its buckets
        mine = owned(COUNT, ["first", "second"], "second")
        assert set(first.lease.held) == set(range(COUNT)) - mine  # type: ignore[union-attr]
        assert first.stats.handoffs == len(mine)
        # The cluster's chores (resuming pauses, retention) go with bucket 0: one instance.
        assert does_chores(first.lease) == (0 not in mine)
        assert second.try_acquire()
        assert set(second.held) == mine
        holders = dict(sql("SELECT lock_id, instance_id FROM scheduler_lock_t"))
        for bucket in range(COUNT):
            expected = "second" if bucket in mine else "first"
            assert holders[1 + bucket * LOCK_STRIDE] == expected
    first.shutdown()


def test_a_standby_takes_a_bucket_whose_holder_session_is_gone_but_not_a_released_one():
    with other_session() as s2:
        with other_session() as s1:
            report(s1, "a")
            report(s2, "b")
            a = leases(s1, "a")
            assert a.try_acquire() or True
            a.acquire(list(range(COUNT)), [])
            assert set(a.held) == set(range(COUNT))
            a.release_some([0])
            b = leases(s2, "b")
            # Released (a hand-off): only its owner takes it, never a standby.
            assert b.acquire([], [0]) == []
        # a's session is gone: a standby takes a's buckets at once (fast failover).
        from tests.helpers import wait_for

        assert wait_for(lambda: b.acquire([], [1, 2]), timeout=5, what="failover") == [1, 2]


def test_changing_the_bucket_count_of_a_live_cluster_is_refused(db_now, settings):
    with other_session() as s1:
        a = leases(s1, "a", count=4)
        assert a.try_acquire()
        with pytest.raises(BucketCountMismatch, match="runs with 4 bucket"):
            agree_bucket_count(connection, base=1, count=8, lease_seconds=30)
        settings.DSCHED_BUCKETS = 8
        errors = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
        assert [e.id for e in errors if e.id.startswith("dsched")] == ["dsched.E023"]
        with pytest.raises(CommandError, match="runs with 4 bucket"):
            call_command("run_scheduler", "--once", "--instance-id=other")
        # An instance with another count never fires: its statements match nothing.
        b = BucketLeases(
            connection, base=1, count=8, replicas=2, instance_id="b", lease_seconds=30,
            fast_failover=True,
        )  # fmt: skip
        sql("UPDATE scheduler_lock_t SET last_heartbeat = 'epoch'")
        assert b.acquire(list(range(8)), []) == []
        assert a.renew()  # the cluster's own count keeps working
        # Once no lease is live the count may change; the old count's leases then match nothing.
        a.release()
        agree_bucket_count(connection, base=1, count=8, lease_seconds=30)
        assert Lease.objects.get(lease_id=1).buckets == 8
        assert not a.try_acquire()
        assert sorted(b.acquire(list(range(8)), [])) == list(range(8))


def test_a_standby_left_behind_by_a_change_of_bucket_count_stops_with_a_clear_error(settings):
    settings.DSCHED_LEASE_ID = 1
    settings.DSCHED_BUCKETS = 1
    leader, standby = Scheduler(instance_id="old-leader"), Scheduler(instance_id="old-standby")
    try:
        leader.step()
        standby.step()
        assert leader.lease.is_leader and not standby.lease.is_leader
        sql("UPDATE scheduler_lock_t SET last_heartbeat = 'epoch'")  # the leader is gone
        # The cluster starts again with 4 buckets while the old standby keeps running.
        with other_session() as s1:
            assert leases(s1, "new", count=4).acquire(list(range(4)), []) == [0, 1, 2, 3]
            standby.step()  # within its lease period: no check yet, it just stands by
            standby._next_count_check = 0.0  # one lease period later
            with pytest.raises(BucketCountMismatch, match="now runs with 4 bucket"):
                standby.step()
    finally:
        leader.lease.step_down()
        standby.shutdown()
