"""What a bulk state change reports back (pause, resume, cancel, dead-letter retry/discard)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChangeCount:
    """How many rows an action changed, and how many it left alone because of their state."""

    changed: int
    skipped: int
