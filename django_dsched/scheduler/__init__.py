"""The scheduler: the leader's lease, the fire path and the ``run_scheduler`` loop.

``run_scheduler`` runs one :class:`Scheduler` per process; one instance holds the lease
(:mod:`.lease`) and fires due schedules in fenced batches (:mod:`.firing`); every instance
reports itself for the cluster page (:mod:`.presence`).
"""

from __future__ import annotations

from django_dsched.scheduler.loop import Scheduler

__all__ = ["Scheduler"]
