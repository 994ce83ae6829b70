"""History upkeep on the leader, off its heartbeat path: the next days' partitions, and
retention.

A pass can be slow (a big backlog of expired rows in the default partition, a lock it waits
on), and the leader's one connection must stay free for heartbeats and fires. So the leader
makes the partitions of the next days, and the exactly-once index of a day partition that
lacks it (:func:`~django_dsched.history.partitions.make_ahead`, whether retention is on or
off), and drops or deletes expired history on a thread of its own,
with its own database connection (Django's connections are per thread), every
``DSCHED_RETENTION_INTERVAL`` seconds while it leads; whatever that thread waits on, the loop
goes on renewing the lease and firing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.history.partitions import make_ahead
from django_dsched.outbox.retention import Purged, purge_expired
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import first_line
from django_dsched.runtime.one_server import ServerPin

logger = get_logger(__name__)

T = TypeVar("T")

# Batches per table in one pass (each its own short transaction); what is left waits for
# the next pass, ``pause`` seconds later.
BATCHES_PER_PASS = 5


class RetentionWorker:
    """Runs :func:`~django_dsched.outbox.retention.purge_expired` while ``leading()``."""

    def __init__(
        self,
        *,
        leading: Callable[[], bool],
        instance_id: str,
        using: str,
        interval: float,
        pause: float,
        pin: ServerPin | None = None,
    ) -> None:
        self.leading = leading
        self.instance_id = instance_id
        self.using = using
        # The scheduler's server: this thread's session must be on it (runtime/one_server.py).
        self.pin = pin
        self.interval = interval
        self.pause = pause
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"dsched-retention:{self.instance_id}", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float) -> None:
        """Ask the thread to end and wait up to ``timeout`` seconds (a purge stuck on a lock
        is left to end with the process: it is a daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        # The first pass comes a pause after the start (not in the way of a new leader's
        # first batches), as soon as this instance leads.
        next_pass = time.monotonic() + self.pause
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now < next_pass:
                    # Sleep through to the pass (stop() wakes it): a thread that woke more
                    # often would take the GIL from the fire path for nothing.
                    self._stop.wait(next_pass - now)
                elif not self.leading():
                    self._stop.wait(self.pause)
                else:
                    next_pass = now + self._purge()
        finally:
            connections[self.using].close()

    def _purge(self) -> float:
        """One pass; returns the seconds until the next.

        Making the days ahead and retention are independent: one failing (a lock, the
        database refusing a row it would move or delete, the connection lost) is logged and
        does not keep the other from running; the next pass tries again after a pause."""
        made = self._attempt("making the days ahead", lambda: make_ahead(using=self.using))
        purged: Purged | None = Purged()
        if app_settings.RETENTION_DAYS is not None:
            purged = self._attempt(
                "retention",
                lambda: purge_expired(max_batches=BATCHES_PER_PASS, using=self.using),
            )
        if made is None or purged is None:
            return self.pause
        self.passes += 1
        # Rows left over, and days (or a day's index) whose lock was not had, are taken
        # after a pause, not in one long stretch.
        again = purged.more or purged.skipped or made.skipped or made.index_skipped
        return self.pause if again else self.interval

    def _attempt(self, what: str, work: Callable[[], T]) -> T | None:
        try:
            if self.pin is not None:
                self.pin.check(connections[self.using])
            return work()
        except DatabaseError as exc:
            logger.warning(
                "%s failed (%s); retrying in %.0fs instance=%s",
                what,
                first_line(exc),
                self.pause,
                self.instance_id,
            )
            if not connections[self.using].is_usable():
                connections[self.using].close()
            return None


def worker_for(
    leading: Callable[[], bool],
    instance_id: str,
    using: str,
    pause: float,
    pin: ServerPin | None = None,
) -> RetentionWorker:
    """The history worker for a scheduler (it runs with retention off too: it makes the
    next days' partitions)."""
    return RetentionWorker(
        leading=leading,
        instance_id=instance_id,
        using=using,
        interval=float(app_settings.RETENTION_INTERVAL),
        pause=pause,
        pin=pin,
    )
