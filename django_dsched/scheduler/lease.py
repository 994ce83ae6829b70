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
* The pid means something only on a direct session. Behind a pooler a backend serves many
  clients and the pooler closes and opens backends on its own: the leader's last backend can
  outlive it, or vanish while it lives. So a leader whose session is not direct
  (``direct_session`` false: the loop detects a pooler) records pid 0, which turns the rule
  off for everyone until the next leader: failover then waits for the lease.
* The leader trusts its lease only until ``renewal sent + lease - margin`` on its own
  monotonic clock, so a slow round trip never stretches leadership.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connections

ACQUIRE = """
INSERT INTO scheduler_lock_t AS l
    (lock_id, instance_id, epoch, last_heartbeat, acquired_ts, holder_pid)
VALUES (%(lease_id)s, %(instance)s, 1, clock_timestamp(), clock_timestamp(),
        CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END)
ON CONFLICT (lock_id) DO UPDATE
    SET instance_id = EXCLUDED.instance_id,
        epoch = l.epoch + 1,
        last_heartbeat = EXCLUDED.last_heartbeat,
        acquired_ts = EXCLUDED.acquired_ts,
        holder_pid = EXCLUDED.holder_pid
    WHERE l.last_heartbeat < clock_timestamp() - make_interval(secs => %(lease)s)
       OR (%(fast)s AND l.holder_pid <> 0
           AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = l.holder_pid))
RETURNING epoch
"""

RENEW = """
UPDATE scheduler_lock_t
SET last_heartbeat = clock_timestamp(),
    holder_pid = CASE WHEN %(own_pid)s THEN pg_backend_pid() ELSE 0 END
WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
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
