"""The building blocks: a histogram fed a batch at a time, and the ``/metrics`` server.

prometheus_client's ``Histogram.observe`` takes a lock and scans the buckets in Python for
each value; a fire batch has up to a thousand lags to record. :class:`BatchHistogram` takes
them all in one call (``bisect`` per value, one lock per batch) and exposes the same
``_bucket`` / ``_sum`` / ``_count`` series as a prometheus_client histogram.
"""

from __future__ import annotations

import gzip
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from django_dsched.conf import app_settings
from django_dsched.metrics.tokens import bearer_matches
from django_dsched.runtime.http import EndpointServer, Request, Response, text

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

# Lateness buckets, in seconds: from a few milliseconds (a leader firing on time) to
# minutes (a failover, an outage, a backlog being drained).
LAG_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
)  # fmt: skip
# Batch durations: a batch of 1,000 fires takes tens of milliseconds.
DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class BatchHistogram:
    """A histogram without labels that records many observations per call.

    Register it on a prometheus_client registry (it is a collector); ``observe_many`` is
    safe from several threads.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(sorted(float(b) for b in buckets))
        self._counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe_many(self, values: Iterable[float]) -> None:
        """Record each of ``values``."""
        bounds = self.bounds
        counts = [0] * (len(bounds) + 1)
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        with self._lock:
            for index, count in enumerate(counts):
                if count:
                    self._counts[index] += count
            self._sum += total

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative bucket counts (``le`` each bound, then +Inf) and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for count in counts:
            running += count
            cumulative.append(running)
        return cumulative, total

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import HistogramMetricFamily

        cumulative, total = self.snapshot()
        labels = [repr(b) for b in self.bounds] + ["+Inf"]
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], list(zip(labels, map(float, cumulative), strict=True)), total)
        yield family

    def describe(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import HistogramMetricFamily

        yield HistogramMetricFamily(self.name, self.documentation)


def exposition(registry: CollectorRegistry, request: Request) -> Response:
    """``/metrics``: the registry in the format the scraper asks for (OpenMetrics or the
    text format), to a scraper with the bearer token when ``DSCHED_METRICS_TOKEN`` is set."""
    from prometheus_client.exposition import choose_encoder

    if app_settings.METRICS_TOKEN and not bearer_matches(request.headers.get("authorization", "")):
        challenge = ("WWW-Authenticate", 'Bearer realm="dsched-metrics"')
        return text(401, "metrics need the bearer token (DSCHED_METRICS_TOKEN)", challenge)
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = encoder(registry)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
    return Response(200, body, content_type)


def serve(port: int, address: str, registry: CollectorRegistry | None = None) -> EndpointServer:
    """Serve ``registry`` (default: prometheus_client's) on ``address:port`` at ``/metrics``,
    from a daemon thread (:class:`~django_dsched.runtime.http.EndpointServer`: bounded
    connections, one thread), until the returned server's ``stop()``."""
    from prometheus_client import REGISTRY

    chosen = REGISTRY if registry is None else registry
    routes = {"/metrics": lambda request: exposition(chosen, request)}
    return EndpointServer(address, port, routes, name="dsched-metrics").start()
