"""Only the members of a cluster rank for its buckets: another cluster on the same database
(another DSCHED_LEASE_ID), or an instance left running with another DSCHED_BUCKETS, reports
itself in the same table but must never be handed a bucket it will not take."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from django.db import connections

from django_dsched.cluster import presence
from django_dsched.cluster.bucket_count import agree_bucket_count
from django_dsched.cluster.lease import BucketLeases, decide
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

COUNT, LEASE = 8, 30.0


class Instance:
    """One bucketed instance on a session of its own, driven round by round."""

    def __init__(self, name: str, base: int, stack: ExitStack) -> None:
        self.name, self.base = name, base
        self.wrapper = connections.create_connection("default")
        self.wrapper.ensure_connection()
        stack.callback(self.wrapper.close)
        self.leases = BucketLeases(
            self.wrapper,
            base=base,
            count=COUNT,
            replicas=2,
            instance_id=name,
            lease_seconds=LEASE,
            fast_failover=True,
        )

    def round(self) -> None:
        with self.wrapper.cursor() as cursor:
            presence.report(cursor, self.name, "owner", None, lease_id=self.base, buckets=COUNT)
        if self.leases.held:
            self.leases.renew()
        decision = decide(self.leases.look(), self.name, set(self.leases.held), COUNT, 2)
        self.leases.release_some(decision.release)
        self.leases.acquire(decision.take_as_owner, decision.take_as_standby)


def test_two_clusters_on_one_database_each_hold_all_their_buckets():
    sql("TRUNCATE scheduler_lock_t, scheduler_instance_t")
    agree_bucket_count("default", base=1, count=COUNT, lease_seconds=LEASE)
    agree_bucket_count("default", base=2, count=COUNT, lease_seconds=LEASE)
    with ExitStack() as stack:
        first = Instance("cluster-1", 1, stack)
        second = Instance("cluster-2", 2, stack)
        for _ in range(6):
            first.round()
            second.round()
        assert sorted(first.leases.held) == list(range(COUNT))
        assert sorted(second.leases.held) == list(range(COUNT))


def test_an_instance_with_another_bucket_count_or_no_buckets_is_not_a_member():
    sql("TRUNCATE scheduler_lock_t, scheduler_instance_t")
    agree_bucket_count("default", base=1, count=COUNT, lease_seconds=LEASE)
    with ExitStack() as stack:
        member = Instance("member", 1, stack)
        with member.wrapper.cursor() as cursor:
            # A standby left running with the old count, and a single-lease standby.
            presence.report(cursor, "old-count", "standby", None, lease_id=1, buckets=4)
            presence.report(cursor, "single", "standby", None, lease_id=1, buckets=1)
        for _ in range(3):
            member.round()
        assert set(member.leases.look().members) == {"member"}
        assert sorted(member.leases.held) == list(range(COUNT))
