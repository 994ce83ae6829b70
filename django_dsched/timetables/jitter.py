"""Jitter: a fixed offset of each fire from its slot, the same on every instance."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

MICROSECONDS_PER_SECOND = 1_000_000


def jitter(
    schedule_id: object,
    slot: datetime,
    jitter_seconds: int,
    following: datetime | None = None,
) -> timedelta:
    """A fixed spread in ``[0, jitter_seconds)`` for this schedule and slot.

    Derived from the schedule id and the slot (as a UTC instant, whatever zone it arrived
    in), so every instance and every path computes the same value and the grid never
    drifts: the next slot is always computed from the slot, not from the jittered time.

    With ``following`` (the next slot) the spread is also shorter than the gap to it, so a
    slot's fire always comes before the next slot: fires keep their order and none is
    coalesced away by its own jitter. When ``jitter_seconds`` fits in the gap (the usual
    case) the value does not depend on ``following`` at all.
    """
    if jitter_seconds <= 0:
        return timedelta(0)
    bound = jitter_seconds * MICROSECONDS_PER_SECOND
    if following is not None:
        bound = min(bound, (following - slot) // timedelta(microseconds=1))
    if bound <= 1:
        return timedelta(0)
    key = f"{schedule_id}:{slot.astimezone(UTC).isoformat()}".encode()
    return timedelta(microseconds=zlib.crc32(key) % bound)
