"""The ``run_scheduler`` loop: elect a leader, fire what is due, sleep until the next due time.

One :class:`Scheduler` runs per process, on the main thread, on one database connection.
The management command only adapts its options to this class.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections, transaction

from django_dsched.cluster import presence
from django_dsched.cluster.bucket_count import agree_bucket_count, stored_bucket_count
from django_dsched.cluster.lease import BucketLeases, LeaseHolder
from django_dsched.conf import app_settings
from django_dsched.exceptions import BucketCountMismatch
from django_dsched.firing.batch import BatchOptions, BatchResult, fire_batch
from django_dsched.firing.fence import Fence, fence_of
from django_dsched.firing.next_due import NextDue, next_due
from django_dsched.firing.plan import REASON_MAX
from django_dsched.firing.throttle import Throttle, read_rates
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop, hold_bounds
from django_dsched.runtime.refusals import refusal, refused
from django_dsched.scheduler.batch_log import log_batch
from django_dsched.scheduler.housekeeping import Housekeeping, does_chores
from django_dsched.scheduler.quarantine import QUARANTINE_LEASES, Quarantine
from django_dsched.scheduler.rebalance import rebalance
from django_dsched.scheduler.retention_worker import RetentionWorker, worker_for
from django_dsched.scheduler.stats import Stats

if TYPE_CHECKING:
    from django_dsched.metrics.scheduler import SchedulerMetrics

logger = get_logger(__name__)

# While a due schedule is locked by another transaction (an admin save, an API call in a
# long transaction) the claim skips it: look again after this many seconds, doubling up to
# the maximum (and never beyond the poll interval), instead of spinning.
LOCKED_RETRY_FIRST = 0.05
LOCKED_RETRY_MAX = 0.5

# Planning a batch may take this fraction of the lease at most; rows left over go to the
# next batch (see firing.plan.plan()).
PLAN_BUDGET_OF_LEASE = 0.25

# A write to schedule_t that makes a schedule due within this many seconds NOTIFYs the leader
# (the trigger in migrations/0001_initial.py spells the same interval); one due later is found
# by a poll, so a leader never sleeps longer than half of it, whatever DSCHED_POLL_INTERVAL:
# the other half is the margin for a transaction that commits after its statement's time.
WAKE_HORIZON = 30.0
LONGEST_SLEEP = WAKE_HORIZON / 2


class Scheduler(DatabaseLoop):
    kind = "scheduler"
    channels = ("dsched_schedules", "dsched_leader")
    stats: Stats

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        batch_size: int | None = None,
        poll_interval: float | None = None,
        using: str | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        super().__init__(instance_id, using)
        # Prometheus series to feed (None: metrics off; see django_dsched.metrics).
        self.metrics = metrics
        self.batch_size = batch_size or app_settings.BATCH_SIZE
        self.poll_interval = min(poll_interval or app_settings.POLL_INTERVAL, LONGEST_SLEEP)
        self.heartbeat_seconds = float(app_settings.HEARTBEAT_SECONDS)
        self.standby_interval = float(app_settings.STANDBY_INTERVAL)
        self.bucket_count = int(app_settings.BUCKETS)
        self.lease: LeaseHolder | BucketLeases
        if self.bucket_count > 1:
            self.lease = BucketLeases(
                self.using,
                base=app_settings.LEASE_ID,
                count=self.bucket_count,
                replicas=int(app_settings.REPLICAS),
                instance_id=self.instance_id,
                lease_seconds=app_settings.LEASE_SECONDS,
                fast_failover=app_settings.FAST_FAILOVER,
            )
        else:
            self.lease = LeaseHolder(
                self.using,
                lease_id=app_settings.LEASE_ID,
                instance_id=self.instance_id,
                lease_seconds=app_settings.LEASE_SECONDS,
                fast_failover=app_settings.FAST_FAILOVER,
            )
        self.plan_budget = self.lease.lease_seconds * PLAN_BUDGET_OF_LEASE
        self.stats = Stats()
        self.chores = Housekeeping(self, self.stats, self.lease.lease_seconds)
        self._next_heartbeat = 0.0
        self._standing_by = False
        self._next_presence = 0.0
        self._next_look = 0.0
        self._agreed = False
        self._next_count_check = 0.0
        self._presence_at: float | None = None  # monotonic time of the last presence report
        self._locked_wait = LOCKED_RETRY_FIRST
        # After the database refused a batch's write: the next batch narrows it down.
        self._narrowing = False
        # Rows the database refused to fire and to set aside (passed over for a while).
        self._quarantine = Quarantine()
        # The database time of the last claim that found rows: what came due after it is
        # on time and claimed first (firing.claim.claim_statement).
        self._since: int | None = None
        self._again: tuple[str, ...] = ()
        # The hosts' fire rates (tenant quotas), read at most once per heartbeat.
        self.throttle = Throttle()
        self._next_rates = 0.0
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

    # -- health --------------------------------------------------------------------------
    def leadership(self) -> str:
        """This instance's part in the cluster: ``"leader"`` (holds a lease it trusts),
        ``"standby"``, or ``"stale"`` (leads but its trust window closed). The one place the
        health endpoints and metrics read leadership from."""
        if not self.lease.is_leader:
            return "standby"
        return "leader" if self.lease.is_trusted() else "stale"

    def readiness(self) -> tuple[bool, str]:
        """Ready when connected and either leading with a trusted lease or standing by with
        a fresh presence heartbeat (written within two of its periods)."""
        ready, why = super().readiness()
        if not ready:
            return ready, why
        role = self.leadership()
        if role == "leader":
            return True, "leader"
        if role == "stale":
            return False, "leader whose lease is not confirmed"
        period = self.lease.lease_seconds
        if self._presence_at is None or time.monotonic() - self._presence_at > 2 * period:
            return False, "standby without a fresh presence heartbeat"
        return True, "standby"

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> float:
        """Do one round of work; return how long to sleep before the next one."""
        self._ensure_session()
        if self.split_brain():
            self._stand_aside()
            return self.standby_interval
        now = time.monotonic()
        if not self._agreed:
            agree_bucket_count(
                self.using,
                base=app_settings.LEASE_ID,
                count=self.bucket_count,
                lease_seconds=self.lease.lease_seconds,
            )
            self._agreed = True
            self._next_count_check = now + self.lease.lease_seconds
        elif not self.lease.is_leader and now >= self._next_count_check:
            self._next_count_check = now + self.lease.lease_seconds
            self._check_bucket_count()
        if isinstance(self.lease, BucketLeases):
            return self._bucket_step(self.lease, now)
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
            if self.metrics is not None:
                self.metrics.became_leader()
            logger.info(
                "became leader instance=%s epoch=%d",
                self.instance_id,
                self.lease.epoch,
                extra={"instance": self.instance_id, "epoch": self.lease.epoch},
            )
            self._report_presence(now)
            self._start_retention()
        elif now >= self._next_heartbeat or not self.lease.is_trusted():
            if not self.lease.renew():
                if self.metrics is not None:
                    self.metrics.renew_failed()
                    self.metrics.lost_leadership()
                logger.warning(
                    "lost leadership instance=%s: another instance holds the lease",
                    self.instance_id,
                    extra={"instance": self.instance_id},
                )
                return 0.0
            self._next_heartbeat = now + self.heartbeat_seconds
            if self.metrics is not None:
                self.metrics.heartbeat()
            self.chores.run()
        wait = self._fire_due()
        if wait <= 0:
            return 0.0  # more may be due, or a heartbeat is due: go round at once
        until_heartbeat = self._next_heartbeat - time.monotonic()
        return max(0.0, min(wait, self.poll_interval, until_heartbeat))

    def _check_bucket_count(self) -> None:
        """Once a lease period while leading nothing: if the cluster now runs with another
        bucket count (it was changed while this instance stood by, or while it was frozen),
        this instance can never lead again; stop with the start-up check's error instead of
        standing by in silence."""
        stored = stored_bucket_count(self.using, app_settings.LEASE_ID)
        if stored is not None and stored != self.bucket_count:
            raise BucketCountMismatch(
                f"DSCHED_BUCKETS is {self.bucket_count} here but the cluster in this database "
                f"(DSCHED_LEASE_ID {app_settings.LEASE_ID}) now runs with {stored} bucket(s): "
                "this instance can never lead it. Start it again with the cluster's count."
            )

    def _bucket_step(self, lease: BucketLeases, now: float) -> float:
        """One round with buckets: renew (every heartbeat), look at the cluster and apply
        the ownership rule (every standby interval), fire what the held buckets have due."""
        if now >= self._next_heartbeat or (lease.is_leader and not lease.is_trusted()):
            self._report_presence(now)
            if lease.is_leader:
                before = set(lease.held)
                lease.renew()
                if self.metrics is not None and set(lease.held) == before:
                    self.metrics.heartbeat()
                if set(lease.held) != before:
                    if self.metrics is not None:
                        self.metrics.renew_failed()
                        self.metrics.lost_leadership()
                        self.metrics.leader.set(int(lease.is_leader))  # it may hold others
                    logger.warning(
                        "lost bucket(s) %s instance=%s: another instance took them",
                        sorted(before - set(lease.held)),
                        self.instance_id,
                    )
                if does_chores(self.lease):
                    self.chores.run()
            self._next_heartbeat = now + self.heartbeat_seconds
        if now >= self._next_look:
            if rebalance(lease, self.instance_id, self.stats, self.metrics):
                self._report_presence(time.monotonic())
            self._next_look = now + self.standby_interval
        if does_chores(self.lease):
            self._start_retention()
        wait = self._fire_due() if lease.is_leader else self.standby_interval
        if wait <= 0:
            return 0.0
        soonest = min(self._next_heartbeat, self._next_look) - time.monotonic()
        return max(0.0, min(wait, self.poll_interval, soonest))

    def _fire_due(self) -> float:
        """Fire batches while schedules are due; return how long to wait (0: go round at once).

        Each batch plans within ``plan_budget`` (a quarter of the lease) and renews the
        lease inside its transaction if the trust window closed meanwhile, so a slow batch
        shrinks; it never outlives the lease.
        """
        self._read_rates()
        while self.lease.is_trusted() and not self.stopping.is_set() and not self.split_brain():
            fence = fence_of(self.lease, app_settings.LEASE_ID, self.instance_id)
            if fence is None:  # trusted implies leading; for the type checker
                break
            started = time.monotonic()
            narrow, skip = self._narrowing, self._quarantine.skipped()
            try:
                result, due, read_at = self._fire_batch(fence, started, narrow, skip)
            except DatabaseError as exc:
                if narrow or not refused(exc):
                    raise
                self._refused_batch(exc, fence)
                continue
            if narrow:
                self.stats.narrowed += 1
                self._narrowing = False
            if result.claimed_at is not None and not result.fenced:
                self._since, self._again = result.claimed_at, result.again_ids
            if result.fenced:
                self._fence_failed(fence)
                return 0.0
            if result.claimed:
                if self.metrics is not None:
                    self.metrics.batch(result, time.monotonic() - started)
                self._count(result, fence.epoch)
            if due is not None:
                # Less the time the commit took since the due time was read; no later than
                # a host held back by its fire rate may be claimed again.
                wait = self._wait_for(due, time.monotonic() - read_at)
                ready = self.throttle.ready_in() if self.throttle.active else None
                return wait if ready is None else min(wait, ready)
            if time.monotonic() >= self._next_heartbeat:
                return 0.0
            if isinstance(self.lease, BucketLeases) and time.monotonic() >= self._next_look:
                return 0.0  # a busy owner still stands by for others' buckets on time
        return 0.0 if self.lease.is_leader and not self.stopping.is_set() else self.poll_interval

    def _fire_batch(
        self, fence: Fence, started: float, narrow: bool, skip: list[str]
    ) -> tuple[BatchResult, NextDue | None, float]:
        """One batch in its own transaction (rolled back if its fence failed); after a short
        one, when to look again, read in the claim's transaction, and when it was read."""
        due: NextDue | None = None
        read_at = 0.0
        with self.transaction() as cursor:
            result = fire_batch(
                cursor,
                fence,
                self.batch_size,
                BatchOptions(
                    deadline=started + self.plan_budget,
                    keep_lease=self._keep_lease,
                    metrics=self.metrics is not None,
                    narrow=narrow,
                    skip=skip,
                    since_us=self._since,
                    again=self._again,
                    throttle=self.throttle,
                ),
            )
            self.stats.claims += 1
            if result.fenced:
                transaction.set_rollback(True, using=self.using)
            elif result.claimed < self.batch_size and not result.deferred and not result.again:
                # All that was due and free is done: when to look again, asked in the
                # claim's own transaction (see firing.next_due.NEXT_DUE).
                passed_over = [*skip, *(i for i, _ in result.quarantined)]
                held_back = self.throttle.held_back() if self.throttle.active else ()
                due = next_due(cursor, fence, passed_over, held_back)
                read_at = time.monotonic()
        return result, due, read_at

    def _refused_batch(self, exc: DatabaseError, fence: Fence) -> None:
        """The database refused a batch's write: one row's data, most likely. The batch is
        rolled back; the next one is written in halves until the rows refused are found and
        set aside."""
        self.stats.db_errors += 1
        logger.warning(
            "the database refused a fire of this batch (%s): finding the row instance=%s",
            refusal(exc, REASON_MAX),
            self.instance_id,
            extra={"instance": self.instance_id, "epoch": fence.epoch},
        )
        self._narrowing = True

    def _fence_failed(self, fence: Fence) -> None:
        """A batch's fence failed: with buckets, some bucket of the batch changed hands (keep
        the others, look at the cluster again at once); else the lease is lost: step down."""
        self.stats.fenced += 1
        if isinstance(self.lease, BucketLeases):
            logger.warning(
                "fire refused: a bucket's lease is no longer ours instance=%s",
                self.instance_id,
            )
            self.lease.renew()
            if self.metrics is not None:
                self.metrics.fence_refused()
                self.metrics.leader.set(int(self.lease.is_leader))
            self._next_look = 0.0
            return
        logger.warning(
            "fire refused: lease epoch %d is no longer ours instance=%s; stepping down",
            fence.epoch,
            self.instance_id,
            extra={"instance": self.instance_id, "epoch": fence.epoch},
        )
        if self.metrics is not None:
            self.metrics.fence_refused()
            self.metrics.lost_leadership()
        self.lease.step_down()

    def _read_rates(self) -> None:
        """At most once per heartbeat: the hosts' fire rates, and this instance's share of
        them (with buckets, the share of the buckets it holds: firing/throttle.py)."""
        now = time.monotonic()
        if now < self._next_rates:
            return
        self._next_rates = now + self.heartbeat_seconds
        default = app_settings.DEFAULT_MAX_FIRES_PER_SECOND
        with connections[self.using].cursor() as cursor:
            rates = read_rates(cursor, default)
        share = 1.0
        if isinstance(self.lease, BucketLeases):
            share = len(self.lease.held) / self.lease.count
        self.throttle.configure(rates, default, share)

    def _count(self, result: BatchResult, epoch: int | None) -> None:
        self.stats.batches += 1
        self.stats.fired += result.fired
        self.stats.duplicates += result.duplicates
        self.stats.set_aside += result.set_aside
        self.stats.deferred += result.deferred
        self.stats.throttled += result.throttled
        self.stats.overlap_skipped += result.skipped
        self.stats.overlap_buffered += result.buffered
        self.stats.overlap_cancelled += result.cancelled
        if self.metrics is not None and self.throttle.active:
            self.metrics.quota_held_back.set(len(self.throttle.held_back()))
        context = {"instance": self.instance_id, "epoch": epoch}
        log_batch(result, context, self.plan_budget, QUARANTINE_LEASES * self.lease.lease_seconds)
        self.stats.refused += len({schedule_id for schedule_id, _ in result.refused})
        self._quarantine.add((i for i, _ in result.quarantined), self.lease.lease_seconds)
        self.stats.quarantined += len(result.quarantined)

    def _wait_for(self, due: NextDue, elapsed: float = 0.0) -> float:
        """The sleep after a round that fired everything it could (``elapsed``: seconds
        since ``due`` was read)."""
        wait = self.poll_interval
        if due.locked:
            # A due row is locked elsewhere; its claim must wait for that lock's release,
            # which may come without a NOTIFY: poll, a little less often each time.
            self.stats.locked_waits += 1
            wait = min(self._locked_wait, wait)
            self._locked_wait = min(self._locked_wait * 2, LOCKED_RETRY_MAX)
        else:
            self._locked_wait = LOCKED_RETRY_FIRST
        if due.seconds is not None:
            wait = min(wait, max(0.0, due.seconds - elapsed))
        return wait

    def _keep_lease(self) -> bool:
        """Before a batch's write: renew the lease (inside the batch's transaction) if the
        local trust window closed while planning. False: the lease is lost."""
        return self.lease.is_trusted() or self.lease.renew()

    def _report_presence(self, now: float) -> None:
        """Tell the cluster page this instance lives (leaders every heartbeat, others less)."""
        bucketed = isinstance(self.lease, BucketLeases)
        if bucketed:
            role = "owner" if self.lease.is_leader else "standby"
        else:
            role = "leader" if self.lease.is_leader else "standby"
        try:
            with connections[self.using].cursor() as cursor:
                presence.report(
                    cursor,
                    self.instance_id,
                    role,
                    self.lease.epoch,
                    lease_id=app_settings.LEASE_ID,
                    buckets=self.lease.count if isinstance(self.lease, BucketLeases) else 1,
                )
        except DatabaseError as exc:
            # The database refuses this instance's row (a rule added by hand): the cluster
            # page misses it (with buckets it is no bucket's owner); it goes on leading.
            if not refused(exc):
                raise
            logger.error("presence row refused (%s) instance=%s", refusal(exc), self.instance_id)
        else:
            self._presence_at = time.monotonic()
        if self.metrics is not None and role == "standby":
            self.metrics.heartbeat()
        # With buckets every instance's presence is its membership: report every heartbeat.
        leading = self.lease.is_leader or bucketed
        period = self.heartbeat_seconds if leading else self.lease.lease_seconds
        self._next_presence = now + period

    def _start_retention(self) -> None:
        if self.retention is None and self._retention_wanted:
            self.retention = worker_for(
                lambda: does_chores(self.lease) and not self.stopping.is_set(),
                self.instance_id,
                self.using,
                pause=self.heartbeat_seconds,
                pin=self.pin,
            )
            if self.retention is not None:
                self.retention.start()

    # -- plumbing ------------------------------------------------------------------------
    def application_name(self) -> str:
        return f"dsched:{self.instance_id}"[:63]

    def transaction_settings(self) -> dict[str, str]:
        # Per transaction, not per session (runtime.loops.hold_bounds): a leader frozen
        # mid-transaction (SIGSTOP, VM pause) loses its session and row locks after half a
        # lease idle, before its lease expires, so a taker finds the lease rows free of its
        # fence's FOR SHARE by then (a batch's transaction is idle for at most its planning
        # budget, a quarter of the lease); and no statement of the loop waits longer than a
        # quarter of the lease (at most 1 s) on a lock held elsewhere (an admin or API
        # transaction, a frozen peer's): it gives up, the loop goes round again.
        return hold_bounds(self.lease.lease_seconds)

    def watch_interval(self) -> float:
        return self.lease.lease_seconds

    def _stand_aside(self) -> None:
        """While two hosts accept writes: lead nothing (the other side may fire too; which
        history survives is the failover manager's to settle, not ours)."""
        if not self.lease.is_leader:
            return
        logger.error(
            "stepping down instance=%s: two hosts of the database URL accept writes",
            self.instance_id,
            extra={"instance": self.instance_id, "epoch": self.lease.epoch},
        )
        try:
            self.lease.release()
        except DatabaseError:
            self.lease.step_down()
            raise
        if self.metrics is not None:
            self.metrics.lost_leadership()

    def on_new_session(self) -> None:
        self._agreed = False
        self.lease.step_down()  # a new session cannot carry the old one's leadership
        # Behind a pooler the backend pid is not this process's life: offer none.
        self.lease.direct_session = not self.pooled

    def on_connection_lost(self) -> None:
        if self.lease.is_leader:
            logger.warning(
                "stepping down: connection lost instance=%s",
                self.instance_id,
                extra={"instance": self.instance_id, "epoch": self.lease.epoch},
            )
            if self.metrics is not None:
                self.metrics.lost_leadership()
        self.lease.step_down()
