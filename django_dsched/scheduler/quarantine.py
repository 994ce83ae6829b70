"""The rows this instance's claims pass over: the database refused to fire them and to set
them aside, so each would fail every batch's write again.

Each is passed over for ``QUARANTINE_LEASES`` leases, then tried again (the refusal may have
been fixed).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

# A row the database refuses to fire and to set aside is passed over by this instance's
# claims for this many leases, then tried again (the refusal may have been fixed).
QUARANTINE_LEASES = 12


class Quarantine:
    """The rows passed over, each until a monotonic time."""

    def __init__(self) -> None:
        # Rows the database refused to fire and to set aside: id -> until (monotonic).
        self.until: dict[str, float] = {}

    def add(self, schedule_ids: Iterable[str], lease_seconds: float) -> None:
        """Pass ``schedule_ids`` over for ``QUARANTINE_LEASES`` leases from now."""
        until = time.monotonic() + QUARANTINE_LEASES * lease_seconds
        for schedule_id in schedule_ids:
            self.until[schedule_id] = until

    def skipped(self) -> list[str]:
        """The quarantined rows the claims pass over now (expired ones are tried again)."""
        if not self.until:
            return []
        now = time.monotonic()
        for schedule_id in [i for i, until in self.until.items() if until <= now]:
            del self.until[schedule_id]
        return sorted(self.until)
