"""Instances report themselves in scheduler_instance_t, so operators can see the cluster."""

from __future__ import annotations

import os
import socket
from typing import Any

REPORT = """
INSERT INTO scheduler_instance_t AS i
    (instance_id, role, hostname, pid, epoch, started_ts, last_seen_ts)
VALUES (%(instance)s, %(role)s, %(hostname)s, %(pid)s, %(epoch)s,
        clock_timestamp(), clock_timestamp())
ON CONFLICT (instance_id) DO UPDATE
    SET role = EXCLUDED.role, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
        epoch = EXCLUDED.epoch, last_seen_ts = EXCLUDED.last_seen_ts,
        started_ts = CASE WHEN i.pid = EXCLUDED.pid THEN i.started_ts
                          ELSE EXCLUDED.started_ts END
"""

FORGET = "DELETE FROM scheduler_instance_t WHERE instance_id = %(instance)s AND pid = %(pid)s"


def report(cursor: Any, instance_id: str, role: str, epoch: int | None) -> None:
    cursor.execute(
        REPORT,
        {
            "instance": instance_id,
            "role": role,
            "hostname": socket.gethostname()[:255],
            "pid": os.getpid(),
            "epoch": epoch,
        },
    )


def forget(cursor: Any, instance_id: str) -> None:
    cursor.execute(FORGET, {"instance": instance_id, "pid": os.getpid()})
