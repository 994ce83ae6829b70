"""The cluster's bucket count: stored on bucket 0's lease row, agreed at start-up.

Every instance of a cluster must run with the same ``DSCHED_BUCKETS``
(:mod:`django_dsched.cluster.buckets`); every lease statement requires the stored count
(``SAME_COUNT`` in :mod:`.lease`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

from django_dsched.cluster.buckets import LOCK_STRIDE, lock_id
from django_dsched.exceptions import BucketCountMismatch
from django_dsched.runtime.loops import bound_transaction, hold_bounds

STORED_COUNT = "SELECT buckets FROM scheduler_lock_t WHERE lock_id = %(base)s"

# Every bucket has its row (released, so the owners take them at once). Epochs only grow:
# rows are never deleted, even when the count shrinks.
CREATE_ROWS = """
INSERT INTO scheduler_lock_t
    (lock_id, instance_id, epoch, last_heartbeat, acquired_ts, holder_pid, buckets)
SELECT lock_id, '', 0, 'epoch'::timestamptz, clock_timestamp(), 0, %(count)s
FROM unnest(%(locks)s::int[]) AS u(lock_id)
ON CONFLICT (lock_id) DO NOTHING
"""

# Leases of this cluster (lock_id = base + bucket * stride) that some instance still holds.
LIVE_LEASES = """
SELECT count(*) FROM scheduler_lock_t
WHERE lock_id %% %(stride)s = %(base)s AND lock_id >= %(base)s
  AND last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
"""


def agree_bucket_count(using: Any, *, base: int, count: int, lease_seconds: float) -> None:
    """Make sure the cluster's stored bucket count is ``count`` and every bucket has its
    lease row; raise :class:`~django_dsched.exceptions.BucketCountMismatch` while a live
    lease of the cluster uses another count.

    The count lives on bucket 0's lease row. It may change only while no lease of the
    cluster is live (every scheduler stopped, or their leases expired): the change takes
    the table in EXCLUSIVE mode, which waits for every fire in flight (they hold their
    fence FOR SHARE) and holds off every acquire and renewal until it commits; from then on
    those of the old count match nothing (``SAME_COUNT``). Never a split brain.
    """

    connection = connections[using] if isinstance(using, str) else using
    params: dict[str, Any] = {
        "base": base,
        "count": count,
        "lease": float(lease_seconds),
        "stride": LOCK_STRIDE,
        "locks": [lock_id(base, b) for b in range(count)],
    }
    if stored_bucket_count(connection, base) == count:
        if count > 1:
            with connection.cursor() as cursor:
                cursor.execute(CREATE_ROWS, params)
        return
    with _transaction(connection, lease_seconds) as cursor:
        cursor.execute("LOCK TABLE scheduler_lock_t IN EXCLUSIVE MODE")
        cursor.execute(STORED_COUNT, params)
        row = cursor.fetchone()
        if row is not None and row[0] != count:
            cursor.execute(LIVE_LEASES, params)
            (live,) = cursor.fetchone()
            if live:
                raise BucketCountMismatch(
                    f"DSCHED_BUCKETS is {count} here but the cluster in this database "
                    f"(DSCHED_LEASE_ID {base}) runs with {row[0]} bucket(s), and {live} of "
                    "its leases are live. Every instance must use the same count: to change "
                    "it, stop every scheduler of the cluster, wait one lease "
                    f"({lease_seconds:g} s), then start them all with the new count."
                )
            cursor.execute(
                "UPDATE scheduler_lock_t SET buckets = %(count)s WHERE lock_id = %(base)s",
                params,
            )
        cursor.execute(CREATE_ROWS, params)


@contextmanager
def _transaction(connection: Any, lease_seconds: float | None = None) -> Iterator[Any]:
    """A transaction on ``connection`` (a Django connection, maybe not the thread's own),
    with the bounds of a transaction that takes locks others wait on (``hold_bounds``: its
    process frozen, every renewal waits on it half a lease at most)."""
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            yield cursor
            return
        cursor.execute("BEGIN")
        try:
            bound_transaction(cursor, hold_bounds(lease_seconds))
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")


def stored_bucket_count(using: Any, base: int) -> int | None:
    """The bucket count the cluster in the database uses (None: no lease row yet)."""
    connection = connections[using] if isinstance(using, str) else using
    with connection.cursor() as cursor:
        cursor.execute(STORED_COUNT, {"base": base})
        row = cursor.fetchone()
    return None if row is None else int(row[0])
