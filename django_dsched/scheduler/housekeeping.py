"""The cluster's chores in the scheduler: which instance runs them, and resuming the
schedules whose pause ended. (Retention runs on its own thread: see :mod:`.retention_worker`.)
"""

from __future__ import annotations

from django.db import DatabaseError

from django_dsched.changes.pauses import resume_expired_pauses
from django_dsched.cluster.lease import BucketLeases, LeaseHolder
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop

logger = get_logger(__name__)


def does_chores(lease: LeaseHolder | BucketLeases) -> bool:
    """Whether this instance runs the cluster's chores (resuming pauses, retention): the
    leader, or with buckets the holder of bucket 0 (one instance at a time)."""
    if isinstance(lease, BucketLeases):
        return 0 in lease.held
    return lease.is_leader


def housekeeping(loop: DatabaseLoop) -> None:
    """Leader chores, once per heartbeat: resume schedules whose pause ended (in a
    transaction of ``loop``).

    A chore that fails on data is logged and left for the next heartbeat: it must not
    stop the fires. Database errors go to the reconnect path as everywhere.
    """
    try:
        with loop.transaction():
            resumed = resume_expired_pauses()
    except DatabaseError:
        raise
    except Exception:
        logger.exception("could not resume the schedules whose pause ended")
        return
    if resumed:
        logger.info("resumed %d schedule(s) whose pause ended", resumed)
