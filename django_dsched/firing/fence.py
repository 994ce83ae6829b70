"""The fence: who may fire, checked inside the fire's own transaction.

Every statement that fires or sets aside begins with the fence (a ``fence`` CTE): this
instance still holds the unexpired lease at its epoch (with buckets: every bucket the batch
touches), taken ``FOR SHARE`` so nobody can take it until the transaction ends. A statement
whose fence fails writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_dsched.cluster.buckets import LOCK_STRIDE
from django_dsched.cluster.lease import TIMELINE, BucketLeases, LeaseHolder
from django_dsched.runtime.arrays import array_literal


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may fire: the lease holder at one epoch; with buckets (``bucket_count > 1``), the
    holder of ``buckets`` at ``epochs`` (``lease_id``: bucket 0's row, DSCHED_LEASE_ID)."""

    lease_id: int
    instance_id: str
    epoch: int
    lease_seconds: float
    bucket_count: int = 1
    buckets: tuple[int, ...] = ()
    epochs: tuple[int, ...] = ()


def fence_of(lease: LeaseHolder | BucketLeases, lease_id: int, instance_id: str) -> Fence | None:
    """The fence of the next batch of ``instance_id`` under ``lease`` (``lease_id``:
    DSCHED_LEASE_ID; None: nothing trusted to fire)."""
    if isinstance(lease, BucketLeases):
        held = sorted(lease.held)
        return Fence(
            lease_id,
            instance_id,
            lease.epoch or 0,
            lease.lease_seconds,
            bucket_count=lease.count,
            buckets=tuple(held),
            epochs=tuple(lease.held[b] for b in held),
        )
    if lease.epoch is None:
        return None
    return Fence(lease_id, instance_id, lease.epoch, lease.lease_seconds)


# This instance still holds the unexpired lease at its epoch; FOR SHARE keeps anyone from
# taking the lease until the transaction ends. dsched.firing keeps the NOTIFY trigger quiet.
# The fence also reads the server's timeline, which each event records in its metadata: two
# histories of one database (a failover with asynchronous replication) tell their fires apart.
FENCE = f"""fence AS MATERIALIZED (
    SELECT epoch, set_config('dsched.firing', 'on', true), {TIMELINE} AS timeline
    FROM scheduler_lock_t
    WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
      AND last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
      AND buckets = 1
    FOR SHARE
)"""

# With buckets: every bucket the batch touches is held by this instance at its epoch,
# unexpired, FOR SHARE (nobody takes any of them until the transaction ends), and the
# cluster still runs with this instance's bucket count.
FENCE_BUCKETS = f"""fence AS MATERIALIZED (
    SELECT max(f.epoch) AS epoch, set_config('dsched.firing', 'on', true),
           {TIMELINE} AS timeline
    FROM (SELECT l.epoch FROM scheduler_lock_t l
          JOIN unnest(%(locks)s::int[], %(epochs)s::bigint[]) AS u(lock_id, epoch)
            ON l.lock_id = u.lock_id AND l.epoch = u.epoch
          WHERE l.instance_id = %(instance)s
            AND l.last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
          FOR SHARE OF l) AS f
    HAVING count(*) = %(fenced)s
       AND EXISTS (SELECT FROM scheduler_lock_t c
                   WHERE c.lock_id = %(lease_id)s AND c.buckets = %(bucket_count)s)
)"""
# The epoch an event records: its bucket's.
BUCKET_EPOCH = "(%(epoch_map)s::bigint[])[(bucket_key & %(mask)s) + 1]"


def with_buckets(statement: str) -> str:
    """``statement`` (WRITE or SET_ASIDE) fenced on the batch's buckets, each event carrying
    its bucket's epoch."""
    return statement.replace(FENCE, FENCE_BUCKETS).replace("%(epoch)s", BUCKET_EPOCH)


def fence_params(fence: Fence) -> dict[str, Any]:
    """The parameters of ``FENCE`` (and of ``FENCE_BUCKETS`` but the buckets touched)."""
    return {
        "lease_id": fence.lease_id,
        "instance": fence.instance_id,
        "epoch": fence.epoch,
        "lease": fence.lease_seconds,
    }


def touched_buckets(fence: Fence, touched: list[int]) -> dict[str, Any]:
    """The parameters of ``FENCE_BUCKETS`` for a batch whose rows are in ``touched``."""
    held = dict(zip(fence.buckets, fence.epochs, strict=True))
    return {
        "locks": [fence.lease_id + b * LOCK_STRIDE for b in touched],
        "epochs": [held[b] for b in touched],
        "fenced": len(touched),
    }


def bucket_params(fence: Fence) -> dict[str, Any]:
    """The parameters of the bucket variants of the claim, the write and NEXT_DUE."""
    epoch_map = [0] * fence.bucket_count
    for bucket, epoch in zip(fence.buckets, fence.epochs, strict=True):
        epoch_map[bucket] = epoch
    return {
        "mask": fence.bucket_count - 1,
        "buckets": list(fence.buckets),
        "bucket_count": fence.bucket_count,
        "epoch_map": array_literal(epoch_map),
    }


# The metadata of the audit events the fire path writes (a schedule set aside, an overlap
# policy's decision): who wrote them, at which epoch (with buckets, the row's bucket's). Over
# a CTE's rows holding ``schedule_name`` and ``origin``.
AUDIT_METADATA = """jsonb_build_object(
               'actor', 'scheduler',
               'schedule_name', schedule_name,
               'origin', origin,
               'instance_id', %(instance)s::text,
               'leader_epoch', %(epoch)s::bigint)"""
