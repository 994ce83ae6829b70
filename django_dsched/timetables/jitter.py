"""Jitter: a fixed offset of each fire from its slot, the same on every instance."""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta


def jitter(schedule_id: object, slot: datetime, jitter_seconds: int) -> timedelta:
    """A fixed spread in ``[0, jitter_seconds)`` for this schedule and slot.

    Derived from the schedule id and the slot, so every instance computes the same value
    and the grid never drifts: the next slot is always computed from the slot, not from the
    jittered time.
    """
    if jitter_seconds <= 0:
        return timedelta(0)
    key = f"{schedule_id}:{slot.isoformat()}".encode()
    return timedelta(microseconds=zlib.crc32(key) % (jitter_seconds * 1_000_000))
