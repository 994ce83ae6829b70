"""Instances report themselves in scheduler_instance_t, so operators can see the cluster."""

from __future__ import annotations

import os
import socket
from typing import Any

REPORT = """
INSERT INTO scheduler_instance_t AS i
    (instance_id, role, hostname, pid, epoch, lease_id, buckets, started_ts, last_seen_ts)
VALUES (%(instance)s, %(role)s, %(hostname)s, %(pid)s, %(epoch)s, %(lease_id)s, %(buckets)s,
        clock_timestamp(), clock_timestamp())
ON CONFLICT (instance_id) DO UPDATE
    SET role = EXCLUDED.role, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
        epoch = EXCLUDED.epoch, last_seen_ts = EXCLUDED.last_seen_ts,
        lease_id = EXCLUDED.lease_id, buckets = EXCLUDED.buckets,
        started_ts = CASE WHEN i.pid = EXCLUDED.pid THEN i.started_ts
                          ELSE EXCLUDED.started_ts END
"""

FORGET = "DELETE FROM scheduler_instance_t WHERE instance_id = %(instance)s AND pid = %(pid)s"


def report(
    cursor: Any,
    instance_id: str,
    role: str,
    epoch: int | None,
    *,
    lease_id: int | None = None,
    buckets: int | None = None,
) -> None:
    """Write this process's row: its role and epoch now, and the cluster it belongs to
    (``lease_id`` and ``buckets``: bucket owners rank only the members of their own cluster)."""
    cursor.execute(
        REPORT,
        {
            "instance": instance_id,
            "role": role,
            "hostname": socket.gethostname()[:255],
            "pid": os.getpid(),
            "epoch": epoch,
            "lease_id": lease_id,
            "buckets": buckets,
        },
    )


def forget(cursor: Any, instance_id: str) -> None:
    cursor.execute(FORGET, {"instance": instance_id, "pid": os.getpid()})
