"""The cluster's chores in the scheduler: which instance runs them, and resuming the
schedules whose pause ended. (Retention runs on its own thread: see :mod:`.retention_worker`.)
"""

from __future__ import annotations

from django.db import DatabaseError

from django_dsched.changes.pause_ends import resume_expired_pauses
from django_dsched.cluster.lease import BucketLeases, LeaseHolder
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop
from django_dsched.runtime.refusals import refusal, refused
from django_dsched.scheduler.quarantine import QUARANTINE_LEASES, Quarantine
from django_dsched.scheduler.stats import Stats

logger = get_logger(__name__)


def does_chores(lease: LeaseHolder | BucketLeases) -> bool:
    """Whether this instance runs the cluster's chores (resuming pauses, retention): the
    leader, or with buckets the holder of bucket 0 (one instance at a time)."""
    if isinstance(lease, BucketLeases):
        return 0 in lease.held
    return lease.is_leader


class Housekeeping:
    """The leader's chores on its loop's session, once per heartbeat: resume the schedules
    whose pause ended (in a transaction of the loop, with its bounds).

    No row can make a chore drop the lease or stop the others: a pause the database refuses
    to end is set aside with its error by :func:`resume_expired_pauses`, and one it refuses
    to set aside as well is passed over by this instance for ``QUARANTINE_LEASES`` leases
    (logged), then tried again. A refusal that still escapes, or a chore failing on data,
    is logged and left for the next heartbeat; only errors that are not a row's (a lost
    connection, a lock wait given up) go to the loop's reconnect path as everywhere.
    """

    def __init__(self, loop: DatabaseLoop, stats: Stats, lease_seconds: float) -> None:
        self.loop = loop
        self.stats = stats
        self.lease_seconds = lease_seconds
        # Pauses the database refused to end and to set aside: id -> until (monotonic).
        self.passed_over = Quarantine()

    def run(self) -> None:
        try:
            with self.loop.transaction():
                ended = resume_expired_pauses(skip=self.passed_over.skipped())
        except DatabaseError as exc:
            if not refused(exc):
                raise
            logger.warning(
                "the database refused a chore (%s); the next heartbeat tries again", refusal(exc)
            )
            return
        except Exception:
            logger.exception("could not resume the schedules whose pause ended")
            return
        if ended.resumed:
            logger.info("resumed %d schedule(s) whose pause ended", ended.resumed)
        for schedule_id, why in ended.set_aside:
            logger.warning("set aside schedule %s: %s", schedule_id, why)
        for schedule_id, why in ended.passed_over:
            logger.warning(
                "the database refuses to resume schedule %s at the end of its pause and to "
                "set it aside (%s): passed over for %d leases",
                schedule_id,
                why,
                QUARANTINE_LEASES,
            )
        self.passed_over.add((i for i, _ in ended.passed_over), self.lease_seconds)
        self.stats.pauses_set_aside += len(ended.set_aside)
        self.stats.pauses_passed_over += len(ended.passed_over)
