"""What one scheduler process did, counted (``Scheduler.stats``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Stats:
    fired: int = 0
    duplicates: int = 0
    fenced: int = 0
    batches: int = 0
    leaderships: int = 0  # times the lease was taken (with buckets: rounds that took any)
    handoffs: int = 0  # buckets released to their new owner (with buckets)
    db_errors: int = 0
    claims: int = 0
    set_aside: int = 0
    refused: int = 0  # rows set aside because the database refused their fire
    quarantined: int = 0  # rows the database refused to fire and to set aside
    narrowed: int = 0  # batches written again in halves to find the rows refused
    deferred: int = 0  # claimed rows left for the next batch by the planning budget
    locked_waits: int = 0  # rounds that waited because a due row was locked elsewhere
    throttled: int = 0  # claimed rows left unplanned: their host was over its fire rate
    pauses_set_aside: int = 0  # ended pauses the database refused to resume (set aside)
    pauses_passed_over: int = 0  # ... and refused to set aside as well (passed over)
