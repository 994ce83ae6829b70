"""The leader's lease in scheduler_lock_t.

Rules (all times are the database's clock):

* A lease is one row per cluster. Taking it bumps ``epoch``; only the holder of the current
  ``(instance_id, epoch)`` can renew it. Nothing matches on ``instance_id`` alone, so two
  processes misconfigured with the same id cannot both lead.
* A standby may take the lease when it has expired (no heartbeat for ``lease_seconds``), or,
  with fast failover on, as soon as the leader's database session is gone: the row records
  the backend pid the leader last renewed from, and a pid missing from ``pg_stat_activity``
  means its process died or lost its connection. (A reused pid only delays failover to the
  lease's expiry; it can never cause an early takeover.) The lease and its epoch stay the
  rule that keeps fires safe; the pid only makes failover fast.
* Taking a lease never waits: a row locked by a fire in flight is passed over this round
  (``SKIP LOCKED``). A frozen holder's lock lasts until its session's idle-in-transaction
  timeout, half a lease (the scheduler loop sets it), so it is gone before the lease expires.
* The pid means something only on a direct session. Behind a pooler a backend serves many
  clients and the pooler closes and opens backends on its own: the leader's last backend can
  outlive it, or vanish while it lives. So a leader whose session is not direct
  (``direct_session`` false: the loop detects a pooler) records pid 0, which turns the rule
  off for everyone until the next leader: failover then waits for the lease.
* The leader trusts its lease only until ``renewal sent + lease - margin`` on its own
  monotonic clock, so a slow round trip never stretches leadership.
* Epochs are fencing tokens across a failover too: a take folds the server's timeline into
  the epoch (``EPOCH_FLOOR``: on timeline *t* an epoch is at least ``(t - 1) * 2**32 + 1``),
  so a promoted standby (a new timeline) hands out epochs above every epoch of the old
  primary's history, even the ones it never received (asynchronous replication). On one
  timeline the fold changes nothing: epochs go 1, 2, 3, ... as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections

from django_dsched.cluster.buckets import bucket_of_lock, lock_id, rankings
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.refusals import refusal, refused

logger = get_logger(__name__)

# A lease is expired when its last heartbeat is older than a lease, or later than a lease
# from now: no renewal writes a time ahead of the database's clock, so such a heartbeat was
# written by hand (say 'infinity', which would hold the lease for ever) or the server's clock
# was set back by more than a lease; either way it holds nothing (a live holder's next
# fence fails and it steps down: one election).
EXPIRED = """(l.last_heartbeat < clock_timestamp() - make_interval(secs => %(lease)s)
             OR l.last_heartbeat > clock_timestamp() + make_interval(secs => %(lease)s))"""

# Takers never wait on a lease row: a row locked by its holder's fire in flight (taken FOR
# SHARE by the fence) or by another taker is passed over (SKIP LOCKED) and looked at again
# next round. A frozen holder's fire keeps its lock only until its session's
# idle-in-transaction timeout (half a lease), which ends before its lease does.
FREE = f"""({EXPIRED}
            OR (%(fast)s AND l.holder_pid <> 0
                AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = l.holder_pid)))"""

# The server's current timeline (the WAL insert timeline: a promoted standby has its new one
# before it accepts a write; pg_control_checkpoint() would lag until the next checkpoint).
# Both functions refuse to run on a standby, where no lease can be taken anyway.
TIMELINE = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint"
# Epochs of timeline t are above (t - 1) << 32: a lease taken after a promotion gets an epoch
# no history before it can have handed out (2**32 takes per timeline before they would meet).
EPOCH_FLOOR = f"(({TIMELINE} - 1) << 32)"

ACQUIRE = f"""
WITH floor AS MATERIALIZED (SELECT {EPOCH_FLOOR} AS epoch),
free AS MATERIALIZED (
    SELECT l.lock_id FROM scheduler_lock_t l
    WHERE l.lock_id = %(lease_id)s AND l.buckets = %(buckets)s AND {FREE}
    FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE scheduler_lock_t l
    SET instance_id = %(instance)s, epoch = GREATEST(l.epoch, floor.epoch) + 1,
        last_heartbeat = clock_timestamp(), acquired_ts = clock_timestamp(),
        holder_pid = CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END
    FROM free, floor WHERE l.lock_id = free.lock_id
    RETURNING l.epoch
),
created AS (
    INSERT INTO scheduler_lock_t
        (lock_id, instance_id, epoch, last_heartbeat, acquired_ts, holder_pid, buckets)
    SELECT %(lease_id)s, %(instance)s, floor.epoch + 1, clock_timestamp(), clock_timestamp(),
           CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END, %(buckets)s
    FROM floor
    WHERE NOT EXISTS (SELECT FROM scheduler_lock_t WHERE lock_id = %(lease_id)s)
    ON CONFLICT (lock_id) DO NOTHING
    RETURNING epoch
)
SELECT epoch FROM taken UNION ALL SELECT epoch FROM created
"""

RENEW = """
UPDATE scheduler_lock_t
SET last_heartbeat = clock_timestamp(),
    holder_pid = CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END
WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
  AND buckets = %(buckets)s
"""

# A released lease reads as expired to everyone at once; NOTIFY wakes the standbys.
RELEASE = """
WITH released AS (
    UPDATE scheduler_lock_t SET last_heartbeat = 'epoch'::timestamptz
    WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
    RETURNING lock_id
)
SELECT pg_notify('dsched_leader', ''), count(*) FROM released
"""


class LeaseHolder:
    """One instance's view of the cluster lease, on one database connection."""

    def __init__(
        self,
        using: Any,
        *,
        lease_id: int,
        instance_id: str,
        lease_seconds: float,
        fast_failover: bool,
    ) -> None:
        self.using = using
        self.lease_id = lease_id
        self.instance_id = instance_id
        self.lease_seconds = float(lease_seconds)
        self.fast_failover = fast_failover
        # False when the connection goes through a pooler: then the backend pid says nothing
        # about this process's life, and the lease records none (see the module's doc).
        self.direct_session = True
        self.margin = min(1.0, self.lease_seconds / 4)
        self.epoch: int | None = None
        self.trusted_until = 0.0

    # -- state ---------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.epoch is not None

    def is_trusted(self) -> bool:
        return self.is_leader and time.monotonic() < self.trusted_until

    # -- SQL -----------------------------------------------------------------------------
    @property
    def connection(self) -> Any:
        """The connection of the calling thread for this alias (or a given wrapper)."""
        return connections[self.using] if isinstance(self.using, str) else self.using

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "instance": self.instance_id,
            "epoch": self.epoch,
            "lease": self.lease_seconds,
            "own_pid": self.fast_failover and self.direct_session,
            "buckets": 1,
            **extra,
        }

    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired, or its holder's session is gone."""
        sent = time.monotonic()
        with self.connection.cursor() as cursor:
            cursor.execute(ACQUIRE, self._params(fast=self.fast_failover))
            row = cursor.fetchone()
        if row is None:
            return False
        self.epoch = int(row[0])
        self.trusted_until = sent + self.lease_seconds - self.margin
        return True

    def renew(self) -> bool:
        """Heartbeat. False means the lease was lost (another instance took it)."""
        if self.epoch is None:
            return False
        sent = time.monotonic()
        with self.connection.cursor() as cursor:
            cursor.execute(RENEW, self._params())
            renewed = cursor.rowcount == 1
        if not renewed:
            self.step_down()
            return False
        self.trusted_until = sent + self.lease_seconds - self.margin
        return True

    def step_down(self) -> None:
        """Stop leading without touching the lease row (it is not ours any more)."""
        self.epoch = None
        self.trusted_until = 0.0

    def release(self) -> None:
        """Give the lease up so a standby takes over at once (graceful stop)."""
        if self.epoch is not None:
            with self.connection.cursor() as cursor:
                cursor.execute(RELEASE, self._params())
        self.step_down()


# -- buckets (DSCHED_BUCKETS > 1): one lease row per bucket, each with its own epoch ---------

# Bucket 0's row (lock_id = DSCHED_LEASE_ID) keeps the cluster's bucket count; every
# statement below holds only while it equals this instance's count.
SAME_COUNT = """EXISTS (SELECT FROM scheduler_lock_t c
               WHERE c.lock_id = %(base)s AND c.buckets = %(count)s)"""

# Take the given buckets where they are free. The owner (``top``) takes a bucket released,
# expired or whose holder's session is gone; a standby only one expired or whose holder's
# session is gone, never one released for a hand-off to its new owner.
ACQUIRE_MANY = f"""
WITH floor AS MATERIALIZED (SELECT {EPOCH_FLOOR} AS epoch),
free AS MATERIALIZED (
    SELECT l.lock_id FROM scheduler_lock_t l
    JOIN unnest(%(locks)s::int[], %(top)s::boolean[]) AS u(lock_id, top)
      ON l.lock_id = u.lock_id
    WHERE (u.top OR l.last_heartbeat > 'epoch'::timestamptz) AND {FREE}
    FOR UPDATE OF l SKIP LOCKED
)
UPDATE scheduler_lock_t l
SET instance_id = %(instance)s, epoch = GREATEST(l.epoch, floor.epoch) + 1,
    last_heartbeat = clock_timestamp(), acquired_ts = clock_timestamp(), buckets = %(count)s,
    holder_pid = CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END
FROM free, floor
WHERE l.lock_id = free.lock_id AND {SAME_COUNT}
RETURNING l.lock_id, l.epoch
"""

RENEW_MANY = f"""
UPDATE scheduler_lock_t l
SET last_heartbeat = clock_timestamp(),
    holder_pid = CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END
FROM unnest(%(locks)s::int[], %(epochs)s::bigint[]) AS u(lock_id, epoch)
WHERE l.lock_id = u.lock_id AND l.instance_id = %(instance)s AND l.epoch = u.epoch
  AND {SAME_COUNT}
RETURNING l.lock_id
"""

RELEASE_MANY = """
WITH released AS (
    UPDATE scheduler_lock_t l SET last_heartbeat = 'epoch'::timestamptz
    FROM unnest(%(locks)s::int[], %(epochs)s::bigint[]) AS u(lock_id, epoch)
    WHERE l.lock_id = u.lock_id AND l.instance_id = %(instance)s AND l.epoch = u.epoch
    RETURNING l.lock_id
)
SELECT pg_notify('dsched_leader', ''), count(*) FROM released
"""

# The live members of this cluster: instances with this DSCHED_LEASE_ID and DSCHED_BUCKETS
# that reported within one lease (database clock; every bucketed scheduler reports every
# heartbeat). Another cluster's instances, and instances left running with another bucket
# count, are not members: ranked first for a bucket they never take, they would make its
# holder hand it off for good.
MEMBERS = """
SELECT instance_id, last_seen_ts FROM scheduler_instance_t
WHERE role IN ('owner', 'standby')
  AND lease_id = %(base)s AND buckets = %(count)s
  AND last_seen_ts > clock_timestamp() - make_interval(secs => %(lease)s)
"""

# Every bucket's lease as this instance must judge it.
LEASES = f"""
SELECT l.lock_id, l.instance_id, l.epoch, l.acquired_ts,
       l.last_heartbeat = 'epoch'::timestamptz AS released,
       {EXPIRED} AS expired,
       (%(fast)s AND l.holder_pid <> 0
        AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = l.holder_pid)) AS gone
FROM scheduler_lock_t l
WHERE l.lock_id = ANY(%(locks)s::int[])
"""


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """One bucket's lease as read by :meth:`BucketLeases.look`."""

    bucket: int
    instance_id: str
    epoch: int
    acquired: datetime
    released: bool
    expired: bool
    gone: bool  # the holder's session is gone (fast failover)

    @property
    def free(self) -> bool:
        return self.released or self.expired or self.gone


@dataclass(frozen=True, slots=True)
class View:
    """The cluster as one instance sees it in one round."""

    members: dict[str, datetime]  # live instance -> last report (database clock)
    leases: dict[int, LeaseRow]


@dataclass(frozen=True, slots=True)
class Decision:
    """What an instance does with its buckets after looking at the cluster."""

    release: list[int]  # held buckets whose owner is another, live instance: hand off
    take_as_owner: list[int]  # buckets this instance owns and may take (free)
    take_as_standby: list[int]  # buckets it stands by for whose holder is gone


def decide(view: View, instance_id: str, held: set[int], count: int, replicas: int) -> Decision:
    """The ownership rule (pure; the property tests drive it).

    * The owner of a bucket is the top of its rendezvous ranking over the live instances
      (this one included); the next ``replicas - 1`` are its standbys.
    * The owner takes its bucket when the lease is free: released, expired or its holder's
      session gone. A standby takes it only when expired or gone (a released bucket waits
      for its owner): this is the failover.
    * A holder that is not the owner hands the bucket off (releases it, between batches)
      once the owner has reported itself after the holder took the bucket: the owner is
      alive now, not merely not yet aged out (a frozen owner never gets a bucket back).
    * A bucket is held by at most one instance at any time whatever the views: taking one
      bumps its epoch, and every fire is fenced on the epochs of its buckets.
    """

    table = rankings(count, tuple(sorted(set(view.members) | {instance_id})), replicas)
    release: list[int] = []
    owner_takes: list[int] = []
    standby_takes: list[int] = []
    for bucket, ranked in enumerate(table):
        row = view.leases.get(bucket)
        if bucket in held:
            top = ranked[0]
            if (
                top != instance_id
                and row is not None
                and view.members.get(top) is not None
                and view.members[top] > row.acquired
            ):
                release.append(bucket)
            continue
        if row is None or not row.free:
            continue
        if ranked[0] == instance_id:
            owner_takes.append(bucket)
        elif instance_id in ranked and (row.expired or row.gone) and not row.released:
            standby_takes.append(bucket)
    return Decision(release, owner_takes, standby_takes)


class BucketLeases:
    """One instance's bucket leases (``DSCHED_BUCKETS > 1``), on one database connection.

    The same interface as :class:`LeaseHolder` for the loop (``is_leader``: holds at least
    one bucket; ``is_trusted``: every held bucket renewed within the trust window), plus
    :meth:`look` and :meth:`apply` for the ownership rule. All held buckets are renewed in
    one statement, so they share one trust window.
    """

    def __init__(
        self,
        using: Any,
        *,
        base: int,
        count: int,
        replicas: int,
        instance_id: str,
        lease_seconds: float,
        fast_failover: bool,
    ) -> None:

        self.using = using
        self.base = base
        self.count = count
        self.replicas = replicas
        self.instance_id = instance_id
        self.lease_seconds = float(lease_seconds)
        self.fast_failover = fast_failover
        self.direct_session = True
        self.margin = min(1.0, self.lease_seconds / 4)
        self.held: dict[int, int] = {}  # bucket -> epoch
        self.trusted_until = 0.0
        self.locks = [lock_id(base, b) for b in range(count)]

    # -- state ---------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return bool(self.held)

    @property
    def epoch(self) -> int | None:
        """The highest epoch held (for logs and the cluster page); None: holds nothing."""
        return max(self.held.values()) if self.held else None

    def is_trusted(self) -> bool:
        return bool(self.held) and time.monotonic() < self.trusted_until

    @property
    def connection(self) -> Any:
        return connections[self.using] if isinstance(self.using, str) else self.using

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {
            "base": self.base,
            "count": self.count,
            "instance": self.instance_id,
            "lease": self.lease_seconds,
            "fast": self.fast_failover,
            "own_pid": self.fast_failover and self.direct_session,
            **extra,
        }

    def _held_params(self, buckets: list[int]) -> dict[str, Any]:
        return self._params(
            locks=[self.locks[b] for b in buckets], epochs=[self.held[b] for b in buckets]
        )

    # -- SQL -----------------------------------------------------------------------------
    def _each(
        self, statement: str, buckets: list[int], params: Callable[[list[int]], dict[str, Any]]
    ) -> list[tuple[Any, ...]]:
        """``statement``'s rows for ``buckets``, in one statement; if the database refuses a
        lease row's write (a rule added by hand on ``scheduler_lock_t``), bucket by bucket,
        leaving out (and logging) the buckets refused: one bucket's row cannot cost this
        instance its other buckets."""
        try:
            return self._fetch(statement, params(buckets))
        except DatabaseError as exc:
            if not refused(exc) or len(buckets) == 1:
                raise
        rows = []
        for bucket in buckets:
            try:
                rows += self._fetch(statement, params([bucket]))
            except DatabaseError as exc:
                if not refused(exc):
                    raise
                logger.error(
                    "the database refuses bucket %d's lease row (%s): this instance leaves "
                    "that bucket instance=%s",
                    bucket,
                    refusal(exc),
                    self.instance_id,
                )
        return rows

    def _fetch(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run ``statement``; inside a transaction (a batch renewing its lease) under a
        savepoint, so a refusal leaves the transaction usable."""
        connection = self.connection
        with connection.cursor() as cursor:
            if not connection.in_atomic_block:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
            cursor.execute("SAVEPOINT dsched_lease")
            try:
                cursor.execute(statement, params)
                rows = list(cursor.fetchall())
            except DatabaseError:
                cursor.execute("ROLLBACK TO SAVEPOINT dsched_lease")
                raise
            finally:
                cursor.execute("RELEASE SAVEPOINT dsched_lease")
            return rows

    def look(self) -> View:
        """Read the live instances and every bucket's lease (two queries)."""

        with self.connection.cursor() as cursor:
            cursor.execute(MEMBERS, self._params())
            members = {instance: seen for instance, seen in cursor.fetchall()}
            cursor.execute(LEASES, self._params(locks=self.locks))
            leases = {}
            for lock, holder, epoch, acquired, released, expired, gone in cursor.fetchall():
                bucket = bucket_of_lock(self.base, lock)
                leases[bucket] = LeaseRow(bucket, holder, epoch, acquired, released, expired, gone)
        return View(members, leases)

    def acquire(self, owner: list[int], standby: list[int]) -> list[int]:
        """Take what the rule allows of ``owner`` and ``standby`` buckets (one statement);
        return the buckets taken."""

        wanted = [*owner, *standby]
        if not wanted:
            return []
        sent = time.monotonic()
        top = dict.fromkeys(owner, True) | dict.fromkeys(standby, False)
        rows = self._each(
            ACQUIRE_MANY,
            wanted,
            lambda some: self._params(
                locks=[self.locks[b] for b in some], top=[top[b] for b in some]
            ),
        )
        taken = []
        for lock, epoch in rows:
            bucket = bucket_of_lock(self.base, lock)
            self.held[bucket] = int(epoch)
            taken.append(bucket)
        if taken and len(taken) == len(self.held):
            self.trusted_until = sent + self.lease_seconds - self.margin
        # Otherwise the buckets held before keep the shared window: the new ones' is later.
        return sorted(taken)

    def try_acquire(self) -> bool:
        """Take every bucket that is free (one instance alone: all of them)."""
        view = self.look()
        decision = decide(view, self.instance_id, set(self.held), self.count, self.replicas)
        return bool(self.acquire(decision.take_as_owner, decision.take_as_standby))

    def renew(self) -> bool:
        """Renew every held bucket in one statement; drop those lost. False: none left."""
        if not self.held:
            return False
        buckets = sorted(self.held)
        sent = time.monotonic()
        kept = {row[0] for row in self._each(RENEW_MANY, buckets, self._held_params)}
        for bucket in buckets:
            if self.locks[bucket] not in kept:
                del self.held[bucket]
        if not self.held:
            self.step_down()
            return False
        self.trusted_until = sent + self.lease_seconds - self.margin
        return True

    def release_some(self, buckets: list[int]) -> None:
        """Hand ``buckets`` off (between batches): their owner takes them at once."""
        buckets = [b for b in buckets if b in self.held]
        if not buckets:
            return
        with self.connection.cursor() as cursor:
            cursor.execute(RELEASE_MANY, self._held_params(buckets))
        for bucket in buckets:
            del self.held[bucket]
        if not self.held:
            self.trusted_until = 0.0

    def step_down(self) -> None:
        self.held = {}
        self.trusted_until = 0.0

    def release(self) -> None:
        """Give every bucket up (graceful stop)."""
        if self.held:
            with self.connection.cursor() as cursor:
                cursor.execute(RELEASE_MANY, self._held_params(sorted(self.held)))
        self.step_down()
