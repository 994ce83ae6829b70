"""The ``run_scheduler`` process: its loop, housekeeping and retention thread.

``run_scheduler`` runs one :class:`Scheduler` per process. It takes its share of the
cluster's leases (:mod:`django_dsched.cluster`) and fires due schedules in fenced batches
(:mod:`django_dsched.firing`).
"""

from __future__ import annotations

from django_dsched.scheduler.loop import Scheduler

__all__ = ["Scheduler"]
