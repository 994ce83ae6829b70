"""Buckets: how schedules are split across scheduler instances, and who owns each bucket.

* Every schedule has a fixed-width ``bucket_key`` (0 .. 2**15 - 1), computed by the database
  from the low bytes of its id (random in UUIDv4 and UUIDv7 alike), on every insert path
  (the generated column's expression, ``BucketKey``, is in :mod:`django_dsched.models.schedule`).
  With ``DSCHED_BUCKETS = n`` (a power of two) its bucket is ``bucket_key & (n - 1)``, so
  changing ``n`` rewrites no row: it needs only every scheduler stopped (see
  :func:`django_dsched.cluster.bucket_count.agree_bucket_count`).
* Ownership is rendezvous (highest-random-weight) hashing of (bucket, instance) over the
  live instances: every instance computes the same ranking from the same membership; the
  top instance owns the bucket, the next ``replicas - 1`` stand by. When an instance joins
  or leaves, only the buckets it wins or held move (about 1/N of them).
* Who actually fires a bucket is decided by its lease row (one per bucket, each with its own
  epoch): the ranking only says who should try to take it. Two instances that disagree on
  the ranking can never both fire a bucket, since the fence checks the lease's epoch.

This module is pure: no database, so the property tests can drive it through any sequence
of memberships.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence

from django_dsched.models.schedule import BUCKET_KEY_BITS

# DSCHED_BUCKETS is at most 2**BUCKET_KEY_BITS (the bits of bucket_key: models/schedule.py).
MAX_BUCKETS = 1 << BUCKET_KEY_BITS
# The lease row of bucket b is lock_id = DSCHED_LEASE_ID + b * LOCK_STRIDE: bucket 0 keeps
# today's row (so DSCHED_BUCKETS = 1 is the single lease exactly), and two clusters on one
# database (two lease ids below LOCK_STRIDE) never share a row. Fits scheduler_lock_t's
# 32-bit key: (2**15 - 1) * 2**16 + 2**16 - 1 = 2**31 - 1.
LOCK_STRIDE = 1 << 16


def is_valid_count(count: object) -> bool:
    """A bucket count is a power of two from 1 to 2**BUCKET_KEY_BITS."""
    return (
        isinstance(count, int)
        and not isinstance(count, bool)
        and 1 <= count <= MAX_BUCKETS
        and count & (count - 1) == 0
    )


def bucket_of(key: int, count: int) -> int:
    return key & (count - 1)


def lock_id(base: int, bucket: int) -> int:
    return base + bucket * LOCK_STRIDE


def bucket_of_lock(base: int, lock: int) -> int:
    return (lock - base) // LOCK_STRIDE


def weight(bucket: int, instance_id: str) -> int:
    """The rendezvous weight of ``instance_id`` for ``bucket`` (the same on every host)."""
    digest = hashlib.blake2b(f"{bucket}\x00{instance_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ranking(bucket: int, instances: Iterable[str], replicas: int | None = None) -> list[str]:
    """``instances`` best first for ``bucket`` (ties, which need equal hashes, by id)."""
    ranked = sorted(instances, key=lambda i: (weight(bucket, i), i), reverse=True)
    return ranked if replicas is None else ranked[:replicas]


def assignment(count: int, instances: Sequence[str], replicas: int) -> dict[int, list[str]]:
    """For every bucket, its owner then its standbys (at most ``replicas`` instances)."""
    table = rankings(count, tuple(sorted(set(instances))), replicas)
    return {bucket: list(ranked) for bucket, ranked in enumerate(table)}


@functools.lru_cache(maxsize=16)
def rankings(count: int, members: tuple[str, ...], replicas: int) -> tuple[tuple[str, ...], ...]:
    """Every bucket's ranking (``replicas`` long) over ``members`` (sorted), computed once
    per membership: instances look at the cluster every standby interval."""
    return tuple(tuple(ranking(bucket, members, replicas)) for bucket in range(count))


def owned(count: int, instances: Sequence[str], instance_id: str) -> set[int]:
    """The buckets ``instance_id`` owns (ranks first for) among ``instances``."""
    members = sorted(set(instances) | {instance_id})
    return {b for b in range(count) if ranking(b, members, 1) == [instance_id]}
