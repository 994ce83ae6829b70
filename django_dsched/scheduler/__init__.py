"""The ``run_scheduler`` process: its loop, housekeeping and retention thread.

``run_scheduler`` runs one :class:`Scheduler` per process. It takes its share of the
cluster's leases (:mod:`django_dsched.cluster`) and fires due schedules in fenced batches
(:mod:`django_dsched.firing`).

- :mod:`.loop`: ``Scheduler``, the loop: lead (or hold buckets), fire batches, sleep.
- :mod:`.rebalance`: with buckets, the ownership rule applied between batches.
- :mod:`.quarantine`: the rows the claims pass over for a while (the database refused to
  fire them and to set them aside).
- :mod:`.batch_log`: what a batch did, in the logs.
- :mod:`.housekeeping`: which instance runs the cluster's chores; resuming the schedules
  whose pause ended.
- :mod:`.retention_worker`: the history's upkeep, on its own thread.
- :mod:`.stats`: ``Stats``, what the process did, counted.
"""

from __future__ import annotations

from django_dsched.scheduler.loop import Scheduler

__all__ = ["Scheduler"]
