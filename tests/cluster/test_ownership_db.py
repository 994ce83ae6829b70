"""The ownership rule against the real database: the real lease statements (ACQUIRE_MANY,
RENEW_MANY, RELEASE_MANY), one session per instance, through any sequence hypothesis picks
of joins, graceful leaves, crashes (the session ends), expiries (a frozen instance: its
heartbeats and presence aged past the lease) and rounds of the loop.

Checked after every step: per bucket, the lease's (instance, epoch) is held by at most that
one instance (any other instance that believes it holds the bucket has an older epoch, so
its fence fails), epochs never go back, and with quiet membership every bucket ends with its
owner."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
from django.db import connections
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from django_dsched.cluster import presence
from django_dsched.cluster.bucket_count import agree_bucket_count
from django_dsched.cluster.buckets import LOCK_STRIDE, ranking
from django_dsched.cluster.lease import BucketLeases, decide
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

COUNT = 8
LEASE = 30.0


class Instance:
    def __init__(self, name: str, stack: ExitStack) -> None:
        self.name = name
        self.wrapper: Any = connections.create_connection("default")
        self.wrapper.ensure_connection()
        stack.callback(self.wrapper.close)
        self.leases = BucketLeases(
            self.wrapper, base=1, count=COUNT, replicas=2, instance_id=name,
            lease_seconds=LEASE, fast_failover=True,
        )  # fmt: skip

    def round(self) -> None:
        with self.wrapper.cursor() as cursor:
            presence.report(cursor, self.name, "owner", None, lease_id=1, buckets=COUNT)
        if self.leases.held:
            self.leases.renew()
        view = self.leases.look()
        decision = decide(view, self.name, set(self.leases.held), COUNT, 2)
        self.leases.release_some(decision.release)
        self.leases.acquire(decision.take_as_owner, decision.take_as_standby)


class Cluster(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        sql("TRUNCATE scheduler_lock_t, scheduler_instance_t")
        agree_bucket_count("default", base=1, count=COUNT, lease_seconds=LEASE)
        self.stack = ExitStack()
        self.running: dict[str, Instance] = {}
        self.dead: list[Instance] = []  # crashed or frozen: they may still believe they hold
        self.names = 0
        self.newest: dict[int, int] = {}

    def teardown(self) -> None:
        self.stack.close()

    @rule()
    def join(self) -> None:
        if len(self.running) < 4:
            self.names += 1
            instance = Instance(f"i{self.names}", self.stack)
            self.running[instance.name] = instance
            instance.round()

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        if self.running:
            instance = self.running.pop(data.draw(st.sampled_from(sorted(self.running))))
            instance.leases.release()
            with instance.wrapper.cursor() as cursor:
                presence.forget(cursor, instance.name)
            instance.wrapper.close()

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        if self.running:
            instance = self.running.pop(data.draw(st.sampled_from(sorted(self.running))))
            instance.wrapper.close()  # its backend ends: "session gone"
            self.dead.append(instance)

    @rule(data=st.data())
    def freeze(self, data: st.DataObject) -> None:
        """Frozen past its lease: its leases and its presence age out; it keeps its views."""
        if self.running:
            instance = self.running.pop(data.draw(st.sampled_from(sorted(self.running))))
            sql(
                "UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval"
                " '1 hour' WHERE instance_id = %s AND last_heartbeat > 'epoch'",
                [instance.name],
            )
            sql(
                "UPDATE scheduler_instance_t SET last_seen_ts = clock_timestamp() -"
                " interval '1 hour' WHERE instance_id = %s",
                [instance.name],
            )
            self.dead.append(instance)

    @rule(data=st.data())
    def thaw(self, data: st.DataObject) -> None:
        frozen = [i for i in self.dead if i.wrapper.connection is not None]
        if frozen and len(self.running) < 4:
            instance = data.draw(st.sampled_from(frozen))
            self.dead.remove(instance)
            self.running[instance.name] = instance
            instance.round()

    @rule(data=st.data())
    def one_round(self, data: st.DataObject) -> None:
        if self.running:
            self.running[data.draw(st.sampled_from(sorted(self.running)))].round()

    @invariant()
    def one_holder_per_bucket_and_epochs_only_grow(self) -> None:
        rows = sql(
            "SELECT lock_id, instance_id, epoch FROM scheduler_lock_t WHERE lock_id %% 65536 = %s",
            [1],
        )
        believers: dict[int, list[tuple[str, int]]] = {}
        for instance in [*self.running.values(), *self.dead]:
            for bucket, epoch in instance.leases.held.items():
                believers.setdefault(bucket, []).append((instance.name, epoch))
        for lock, holder, epoch in rows:
            bucket = (lock - 1) // LOCK_STRIDE
            assert epoch >= self.newest.get(bucket, 0)
            self.newest[bucket] = epoch
            current = [name for name, e in believers.get(bucket, []) if e == epoch]
            assert current in ([], [holder]), (bucket, holder, epoch, believers[bucket])
            # Anyone else believing it holds the bucket has an older epoch: fenced.
            assert all(e < epoch for name, e in believers.get(bucket, []) if name != holder)

    @rule()
    def settle(self) -> None:
        if not self.running:
            return
        # Quiet membership for a lease: the dead instances' presence ages out.
        for instance in self.dead:
            sql(
                "UPDATE scheduler_instance_t SET last_seen_ts = clock_timestamp() -"
                " interval '1 hour' WHERE instance_id = %s",
                [instance.name],
            )
        for _ in range(3):
            for instance in list(self.running.values()):
                instance.round()
        # Dead instances' leases: a crashed one's session is gone; a frozen one's expired.
        members = sorted(self.running)
        holders = dict(sql("SELECT lock_id, instance_id FROM scheduler_lock_t"))
        for bucket in range(COUNT):
            top = ranking(bucket, members, 1)[0]
            assert holders[1 + bucket * LOCK_STRIDE] == top


def test_the_ownership_rule_on_the_database_keeps_one_holder_per_bucket():
    run_state_machine_as_test(
        Cluster, settings=settings(max_examples=25, stateful_step_count=25, deadline=None)
    )
