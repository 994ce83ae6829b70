"""The scheduler's own metrics: what this process fired, how late, how its lease fares.

One :class:`SchedulerMetrics` per process (:func:`scheduler_metrics`), fed once per batch
by the loop (:meth:`SchedulerMetrics.batch`), never per fire. The fire lag is the database
time of the write statement minus each fired slot, both from the database's clock. The
``topic`` label is a tenant's to name: bounded (:mod:`django_dsched.metrics.labels`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from django_dsched.metrics.labels import OTHER, BoundedLabel
from django_dsched.metrics.registry import DURATION_BUCKETS, LAG_BUCKETS, BatchHistogram

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from django_dsched.firing.batch import BatchResult

_lock = threading.Lock()
_instance: SchedulerMetrics | None = None


class SchedulerMetrics:
    """The ``dsched_*`` series of ``run_scheduler`` (on ``registry``, by default
    prometheus_client's)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if registry is None else registry
        counter, gauge = partial(Counter, registry=registry), partial(Gauge, registry=registry)
        self.topics = BoundedLabel()
        self.fires = counter(
            "dsched_fires",
            "Slots fired by this process's committed batches (a slot refused as already fired "
            "also counts in dsched_duplicate_slots_total), by topic: the first "
            f"DSCHED_METRICS_LABEL_VALUES topics seen, the others under {OTHER}.",
            ["topic"],
        )
        self.fire_lag = BatchHistogram(
            "dsched_fire_lag_seconds",
            "Seconds from each fired slot to the database time of the statement that wrote "
            "its fire (database clock).",
            LAG_BUCKETS,
        )
        registry.register(self.fire_lag)
        self.misfires = counter(
            "dsched_misfires",
            "Schedules whose fire skipped or coalesced missed slots (misfire_count increments).",
        )
        self.overlap = counter(
            "dsched_overlap_slots",
            "Slots not fired at their time because the previous run was still going (skipped, "
            "buffered) and runs cancelled (CANCEL_OTHER), by decision (docs/overlap.md).",
            ["decision"],
        )
        self.duplicates = counter(
            "dsched_duplicate_slots",
            "Slots the database refused because they had already fired.",
        )
        self.set_aside = counter(
            "dsched_set_aside",
            "Schedules this process set aside: they could not be planned, or the database "
            "refused their fire.",
        )
        self.deferred = counter(
            "dsched_deferred_schedules",
            "Claimed schedules left for the next batch because planning ran out of time.",
        )
        self.quota_delayed = counter(
            "dsched_quota_delayed_schedules",
            "Claimed schedules a batch left unplanned because their host was over its fire "
            "rate (max_fires_per_second): released, and claimed again once the host has "
            "tokens; none is dropped. One left in several batches counts in each.",
        )
        self.calendar_slots = counter(
            "dsched_calendar_slots",
            "Slots calendars dropped (excluded) or moved to another day (shifted), by fate.",
            ["fate"],
        )
        self.quota_held_back = gauge(
            "dsched_quota_held_back_hosts",
            "Hosts over their fire rate whose rows the last claim passed over.",
        )
        self.batch_duration = Histogram(
            "dsched_batch_duration_seconds",
            "Seconds one fire batch took, claim to commit (process monotonic clock).",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._lease_series(counter, gauge)
        self._heartbeat_at = time.monotonic()
        self.heartbeat_age.set_function(lambda: time.monotonic() - self._heartbeat_at)

    def _lease_series(self, counter: Callable[..., Any], gauge: Callable[..., Any]) -> None:
        """The series of the lease: leadership, renewals, fenced batches, the heartbeat."""
        self.leadership_changes = counter(
            "dsched_leadership_changes",
            "Times this process took or lost the lease.",
            ["change"],
        )
        self.renew_failures = counter(
            "dsched_lease_renew_failures",
            "Lease renewals that found the lease held by another instance.",
        )
        self.fenced = counter(
            "dsched_fenced_batches",
            "Batches refused by the fence (the lease was no longer ours); nothing was written.",
        )
        self.leader = gauge("dsched_leader", "1 while this process holds the lease, else 0.")
        self.heartbeat_age = gauge(
            "dsched_heartbeat_age_seconds",
            "Seconds since this process last wrote its lease (leader) or presence (standby) "
            "heartbeat.",
        )

    # -- fed by the loop ----------------------------------------------------------------------
    def batch(self, result: BatchResult, seconds: float) -> None:
        """Record one committed batch (``seconds``: its duration, claim to commit)."""
        self.batch_duration.observe(seconds)
        if result.topics:
            for topic, count in self.topics.fold(result.topics.items()).items():
                self.fires.labels(topic).inc(count)
        written = result.written_us
        if written is not None and result.slots:
            self.fire_lag.observe_many(
                (written - slot) / 1e6 for slot in result.slots if slot is not None
            )
        if result.misfired:
            self.misfires.inc(result.misfired)
        for decision, count in (
            ("skipped", result.skipped),
            ("buffered", result.buffered),
            ("cancelled", result.cancelled),
        ):
            if count:
                self.overlap.labels(decision).inc(count)
        if result.duplicates:
            self.duplicates.inc(result.duplicates)
        if result.set_aside:
            self.set_aside.inc(result.set_aside)
        if result.deferred:
            self.deferred.inc(result.deferred)
        if result.throttled:
            self.quota_delayed.inc(result.throttled)
        for fate, count in (result.calendar_fates or {}).items():
            self.calendar_slots.labels(fate).inc(count)

    def became_leader(self) -> None:
        self.leadership_changes.labels("acquired").inc()
        self.leader.set(1)
        self.heartbeat()

    def lost_leadership(self) -> None:
        self.leadership_changes.labels("lost").inc()
        self.leader.set(0)

    def renew_failed(self) -> None:
        self.renew_failures.inc()

    def fence_refused(self) -> None:
        self.fenced.inc()

    def heartbeat(self) -> None:
        """A lease or presence heartbeat was written."""
        self._heartbeat_at = time.monotonic()


def scheduler_metrics() -> SchedulerMetrics:
    """This process's :class:`SchedulerMetrics`, made (and registered) on first use."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = SchedulerMetrics()
        return _instance
