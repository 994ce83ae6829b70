"""The messages a relay's claims pass over: the database refused to claim them and to
dead-letter them, so each would fail every claim again (:mod:`.refused`).

Each is passed over for ``QUARANTINE_TIMEOUTS`` visibility timeouts (ten minutes by
default), then tried again (the rule that refused it may have been fixed). Per relay, in
memory: a new relay process tries them once, finds them again, and passes over them too.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable

# A message the database refuses to claim and to dead-letter is passed over by this relay's
# claims for this many visibility timeouts, then tried again.
QUARANTINE_TIMEOUTS = 10


class Quarantine:
    """The messages passed over, each until a monotonic time (the relay's thread and its
    claim threads claim: the set is guarded)."""

    def __init__(self, visibility_timeout: float) -> None:
        self.seconds = QUARANTINE_TIMEOUTS * visibility_timeout
        self.until: dict[uuid.UUID, float] = {}
        self._lock = threading.Lock()

    def add(self, ids: Iterable[uuid.UUID]) -> None:
        """Pass ``ids`` over from now on, for :attr:`seconds`."""
        until = time.monotonic() + self.seconds
        with self._lock:
            for id_ in ids:
                self.until[id_] = until

    def skipped(self) -> list[uuid.UUID]:
        """The messages passed over now (expired ones are tried again)."""
        if not self.until:
            return []
        now = time.monotonic()
        with self._lock:
            for id_ in [i for i, until in self.until.items() if until <= now]:
                del self.until[id_]
            return sorted(self.until)
