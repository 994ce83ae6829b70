"""The ``run_scheduler`` loop: elect a leader, fire what is due, sleep until the next due time.

One :class:`Scheduler` runs per process, on the main thread, on one database connection.
The management command only adapts its options to this class.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.db import DatabaseError, connections, transaction

from django_dsched.conf import app_settings
from django_dsched.loops import DatabaseLoop
from django_dsched.scheduler import presence
from django_dsched.scheduler.firing import Fence, fire_batch, seconds_until_next_due
from django_dsched.scheduler.lease import LeaseHolder
from django_dsched.scheduler.retention_worker import RetentionWorker, worker_for

logger = logging.getLogger(__name__)


@dataclass
class Stats:
    fired: int = 0
    duplicates: int = 0
    fenced: int = 0
    batches: int = 0
    leaderships: int = 0
    db_errors: int = 0


class Scheduler(DatabaseLoop):
    kind = "scheduler"
    channels = ("dsched_schedules", "dsched_leader")

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        batch_size: int | None = None,
        poll_interval: float | None = None,
        using: str | None = None,
    ) -> None:
        super().__init__(instance_id, using)
        self.batch_size = batch_size or app_settings.BATCH_SIZE
        self.poll_interval = poll_interval or app_settings.POLL_INTERVAL
        self.heartbeat_seconds = float(app_settings.HEARTBEAT_SECONDS)
        self.standby_interval = float(app_settings.STANDBY_INTERVAL)
        self.lease = LeaseHolder(
            self.using,
            lease_id=app_settings.LEASE_ID,
            instance_id=self.instance_id,
            lease_seconds=app_settings.LEASE_SECONDS,
            fast_failover=app_settings.FAST_FAILOVER,
        )
        self.stats = Stats()
        self._next_heartbeat = 0.0
        self._standing_by = False
        self._next_presence = 0.0
        self._retention_wanted = True
        self.retention: RetentionWorker | None = None

    # -- control -------------------------------------------------------------------------
    def run_until_idle(self) -> int:
        """Lead (if the lease is free), fire everything due now, give the lease up.

        Returns how many schedules fired. Used by ``run_scheduler --once``.
        """
        fired_before = self.stats.fired
        self._retention_wanted = False  # a one-off run leaves retention to the others
        try:
            self._guarded(self.step)
            while self.lease.is_leader and not self.stopping.is_set():
                if self._guarded(self.step) > 0:
                    break
        finally:
            self.shutdown()
        return self.stats.fired - fired_before

    def shutdown(self) -> None:
        if self.retention is not None:
            self.retention.stop(timeout=self.heartbeat_seconds)
        if self.lease.is_leader:
            try:
                self.lease.release()
                logger.info("released leadership instance=%s (graceful stop)", self.instance_id)
            except DatabaseError:
                logger.warning("could not release the lease; it will expire", exc_info=True)
                self.lease.step_down()
        try:
            with connections[self.using].cursor() as cursor:
                presence.forget(cursor, self.instance_id)
        except DatabaseError:
            pass  # the row ages out of the cluster page
        self._close()

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> float:
        """Do one round of work; return how long to sleep before the next one."""
        self._ensure_session()
        now = time.monotonic()
        if now >= self._next_presence:
            self._report_presence(now)
        if not self.lease.is_leader:
            if not self.lease.try_acquire():
                if not self._standing_by:
                    self._standing_by = True
                    logger.info("standing by instance=%s: another instance leads", self.instance_id)
                return self.standby_interval
            self._standing_by = False
            self.stats.leaderships += 1
            self._next_heartbeat = now + self.heartbeat_seconds
            logger.info("became leader instance=%s epoch=%d", self.instance_id, self.lease.epoch)
            self._report_presence(now)
            self._start_retention()
        elif now >= self._next_heartbeat or not self.lease.is_trusted():
            if not self.lease.renew():
                logger.warning(
                    "lost leadership instance=%s: another instance holds the lease",
                    self.instance_id,
                )
                return 0.0
            self._next_heartbeat = now + self.heartbeat_seconds
            self._housekeeping()
        if self._fire_due():
            return 0.0  # more may be due, or a heartbeat is due: go round at once
        until_heartbeat = self._next_heartbeat - time.monotonic()
        with connections[self.using].cursor() as cursor:
            until_due = seconds_until_next_due(cursor)
        wait = self.poll_interval if until_due is None else max(0.0, until_due)
        return max(0.0, min(wait, self.poll_interval, until_heartbeat))

    def _fire_due(self) -> bool:
        """Fire batches while schedules are due; True when there is more to do at once."""
        connection = connections[self.using]
        while self.lease.is_trusted() and not self.stopping.is_set():
            fence = Fence(
                app_settings.LEASE_ID,
                self.instance_id,
                self.lease.epoch,
                self.lease.lease_seconds,
            )
            with transaction.atomic(using=self.using), connection.cursor() as cursor:
                result = fire_batch(cursor, fence, self.batch_size)
                if result.fenced:
                    transaction.set_rollback(True, using=self.using)
            if result.fenced:
                self.stats.fenced += 1
                logger.warning(
                    "fire refused: lease epoch %d is no longer ours instance=%s; stepping down",
                    fence.epoch,
                    self.instance_id,
                )
                self.lease.step_down()
                return True
            if result.claimed == 0:
                return False
            self.stats.batches += 1
            self.stats.fired += result.fired
            self.stats.duplicates += result.duplicates
            logger.info(
                "fired %d schedule(s)%s instance=%s epoch=%d",
                result.fired,
                f": {result.names}" if result.names else "",
                self.instance_id,
                fence.epoch,
            )
            if result.duplicates:
                logger.warning(
                    "skipped %d slot(s) that had already fired (refused by the database)",
                    result.duplicates,
                )
            if result.claimed < self.batch_size:
                return False
            if time.monotonic() >= self._next_heartbeat:
                return True
        return not self.lease.is_trusted() and self.lease.is_leader

    def _report_presence(self, now: float) -> None:
        """Tell the cluster page this instance lives (leaders every heartbeat, others less)."""
        role = "leader" if self.lease.is_leader else "standby"
        with connections[self.using].cursor() as cursor:
            presence.report(cursor, self.instance_id, role, self.lease.epoch)
        period = self.heartbeat_seconds if self.lease.is_leader else self.lease.lease_seconds
        self._next_presence = now + period

    def _housekeeping(self) -> None:
        """Leader chores, once per heartbeat: resume schedules whose pause ended. (Retention
        runs on its own thread: see :mod:`.retention_worker`.)"""
        from django_dsched.services import resume_expired_pauses

        resumed = resume_expired_pauses()
        if resumed:
            logger.info("resumed %d schedule(s) whose pause ended", resumed)

    def _start_retention(self) -> None:
        if self.retention is None and self._retention_wanted:
            self.retention = worker_for(
                lambda: self.lease.is_leader and not self.stopping.is_set(),
                self.instance_id,
                self.using,
                pause=self.heartbeat_seconds,
            )
            if self.retention is not None:
                self.retention.start()

    # -- plumbing ------------------------------------------------------------------------
    def session_settings(self) -> dict[str, str]:
        # A leader frozen mid-transaction (SIGSTOP, VM pause) loses its session and row locks.
        idle_timeout_ms = int(self.lease.lease_seconds * 2000)
        return {
            "application_name": f"dsched:{self.instance_id}"[:63],
            "idle_in_transaction_session_timeout": str(idle_timeout_ms),
        }

    def on_new_session(self) -> None:
        self.lease.step_down()  # a new session cannot carry the old one's leadership

    def on_connection_lost(self) -> None:
        if self.lease.is_leader:
            logger.warning("stepping down: connection lost instance=%s", self.instance_id)
        self.lease.step_down()
