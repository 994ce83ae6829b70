"""The relay's own metrics: deliveries by transport and outcome, and their end-to-end latency.

One :class:`RelayMetrics` per process (:func:`relay_metrics`), fed once per chunk sent and
once per settle statement. The latency is the database time a delivery was recorded
(``delivered_ts``) minus the fire's slot (the CloudEvent's ``scheduledtime``), both from
the database's clock. The outcome labels and the slot are the outbox's, which decides each
outcome (:mod:`django_dsched.outbox.tally`). The transports are the project's, but a label
whose values come from routing is bounded all the same (:mod:`django_dsched.metrics.labels`).
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django_dsched.metrics.labels import OTHER, BoundedLabel
from django_dsched.metrics.registry import LAG_BUCKETS, BatchHistogram
from django_dsched.outbox.tally import DEAD_LETTER, DELIVERED, LOST, RETRY

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

_lock = threading.Lock()
_instance: RelayMetrics | None = None


class RelayMetrics:
    """The ``dsched_*`` series of ``run_relay`` (on ``registry``, by default
    prometheus_client's)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge

        registry = REGISTRY if registry is None else registry
        self.transports = BoundedLabel()
        self.deliveries = Counter(
            "dsched_deliveries",
            f"Delivery outcomes recorded by this process: {DELIVERED}, {RETRY} (a failed attempt "
            f"to be retried), {DEAD_LETTER}, {LOST} (the claim expired and another relay took it)."
            f" Transports past DSCHED_METRICS_LABEL_VALUES count under {OTHER}.",
            ["transport", "outcome"],
            registry=registry,
        )
        self.attempts = Counter(
            "dsched_delivery_attempts",
            "Messages handed to a transport by this process (each attempt counts).",
            ["transport"],
            registry=registry,
        )
        self.latency = BatchHistogram(
            "dsched_delivery_latency_seconds",
            "Seconds from a fire's slot to the database time its delivery was recorded.",
            LAG_BUCKETS,
        )
        registry.register(self.latency)
        self.open_circuits = Gauge(
            "dsched_relay_open_circuits",
            "Destinations (a route, for one host) this process holds back: their circuit is "
            "open or half-open after sends failed in a row (the admin's cluster page and "
            "dsched cluster name them).",
            registry=registry,
        )
        self.sends = Gauge(
            "dsched_relay_sends_in_flight",
            "Sends this process has under way (at most DSCHED_RELAY_CONCURRENCY).",
            registry=registry,
        )
        self.held = Gauge(
            "dsched_relay_held_messages",
            "Messages this process holds: claimed, not recorded yet (queued, sent or sending).",
            registry=registry,
        )

    def attempted(self, transport: str, count: int) -> None:
        self.attempts.labels(self.transports(transport)).inc(count)

    def circuits(self, count: int) -> None:
        self.open_circuits.set(count)

    def holding(self, sends: int, held: int) -> None:
        self.sends.set(sends)
        self.held.set(held)

    def settled(self, outcomes: Tally[tuple[str, str]], latencies: Iterable[float]) -> None:
        """Record one settle statement: counts per (transport, outcome), and the
        slot-to-delivered seconds of what was delivered."""
        for (transport, outcome), count in outcomes.items():
            self.deliveries.labels(self.transports(transport), outcome).inc(count)
        self.latency.observe_many(latencies)


def relay_metrics() -> RelayMetrics:
    """This process's :class:`RelayMetrics`, made (and registered) on first use."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = RelayMetrics()
        return _instance
