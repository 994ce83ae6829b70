"""Fires per second per host: a token bucket per host in the scheduler process.

A host's rate is its ``tenant_quota_t.max_fires_per_second`` (an empty one: no limit), else
``DSCHED_DEFAULT_MAX_FIRES_PER_SECOND``. The loop reads the table at most once per heartbeat
(:func:`read_rates`) and hands it to :meth:`Throttle.configure`; the fire path asks the
buckets only (:func:`~django_dsched.firing.batch.fire_batch`): no query per fire.

Per batch, the claim passes over the hosts whose bucket cannot pay for a tick's worth of
fires (:meth:`Throttle.held_back`), and each claimed row of a limited host takes one token
(:meth:`Throttle.take`); a row whose host has none left is not planned: it stays as it was
(its slot, its next run), is released at commit and is claimed again once its host has
tokens. A fire over the rate is delayed, never dropped; what a late slot becomes is its
misfire policy's, as after any lag.

Buckets refill from the monotonic clock at the host's rate; a bucket holds at most a
second of fires (at least one). With buckets of schedules (``DSCHED_BUCKETS > 1``) each
instance fires the share of every host's rate that its buckets hold (``share``: held /
count), since a host's schedules spread evenly over the buckets (their ids' random bits):
together the instances never exceed the rate, and a host whose due rows sit unevenly in
the buckets fires somewhat below it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A held-back host is claimed again once its bucket holds this many seconds of fires (and
# at least one fire): one claim of its rows per tick at most, not one per token.
TICK = 0.1
# Seconds of fires a bucket holds when full (at least one fire).
BURST = 1.0
# Tokens are floats refilled by elapsed time: a bucket this close to a whole fire has it.
EPSILON = 1e-9

# The rows that differ from the default: a rate, or NULL (no limit) where a default is set.
RATES = """SELECT host_id::text, max_fires_per_second FROM tenant_quota_t
           WHERE max_fires_per_second IS DISTINCT FROM %s"""


def read_rates(cursor: Any, default: float | None) -> dict[str, float | None]:
    """The hosts whose rate is not ``default``, and their rate (None: no limit)."""
    cursor.execute(RATES, [default])
    return {host: (None if rate is None else float(rate)) for host, rate in cursor.fetchall()}


@dataclass(slots=True)
class Bucket:
    rate: float  # fires per second (this instance's share)
    size: float  # most tokens it holds
    need: float  # tokens a held-back host needs to be claimed again
    tokens: float
    stamp: float  # monotonic time of the last refill

    def refill(self, now: float) -> float:
        if now > self.stamp:
            self.tokens = min(self.size, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
        return self.tokens


class Throttle:
    """The token buckets of one scheduler process (the loop's; ``clock``: monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.default: float | None = None
        self.rates: dict[str, float | None] = {}
        self.share = 1.0
        self.buckets: dict[str, Bucket] = {}
        self.delayed = 0  # rows left unplanned for want of tokens, since the start

    @property
    def active(self) -> bool:
        """Whether any host has a rate (else the fire path asks nothing)."""
        return self.default is not None or any(r is not None for r in self.rates.values())

    def configure(
        self,
        rates: Mapping[str, float | None] | Mapping[uuid.UUID, float | None],
        default: float | None,
        share: float = 1.0,
    ) -> None:
        """The hosts' rates (:func:`read_rates`), the default, and this instance's share.
        Buckets keep their tokens (within their new size); full ones are dropped (a new
        bucket starts full)."""
        self.rates = {str(host): rate for host, rate in rates.items()}
        self.default = default
        self.share = share
        now = self.clock()
        for host, bucket in list(self.buckets.items()):
            rate = self.rate(host)
            if rate is None or bucket.refill(now) >= bucket.size - EPSILON:
                del self.buckets[host]
                continue
            fresh = self._new(rate, now)
            bucket.rate, bucket.size, bucket.need = fresh.rate, fresh.size, fresh.need
            bucket.tokens = min(bucket.tokens, bucket.size)

    def rate(self, host: str) -> float | None:
        """This instance's rate for ``host`` (None: no limit)."""
        rate = self.rates.get(host, self.default)
        return None if rate is None else rate * self.share

    def _new(self, rate: float, now: float) -> Bucket:
        size = max(1.0, rate * BURST)
        need = min(size, max(1.0, rate * TICK))
        return Bucket(rate, size, need, size, now)

    def _bucket(self, host: str) -> Bucket | None:
        bucket = self.buckets.get(host)
        if bucket is None:
            rate = self.rate(host)
            if rate is None or rate <= 0:
                return None
            bucket = self.buckets[host] = self._new(rate, self.clock())
        return bucket

    def held_back(self) -> list[str]:
        """The hosts the claim passes over now: their bucket cannot pay a tick's fires."""
        now = self.clock()
        return [h for h, b in self.buckets.items() if b.refill(now) < b.need - EPSILON]

    def take(self, host: str) -> bool:
        """One fire for ``host``: True when it may fire now (a token taken, or no limit)."""
        bucket = self._bucket(host)
        if bucket is None:
            return True
        if bucket.refill(self.clock()) >= 1.0 - EPSILON:
            bucket.tokens -= 1.0
            return True
        self.delayed += 1
        return False

    def ready_in(self) -> float | None:
        """Seconds until the first held-back host may be claimed again (None: none is)."""
        now = self.clock()
        waits = [
            (b.need - b.tokens) / b.rate
            for b in self.buckets.values()
            if b.refill(now) < b.need - EPSILON
        ]
        return max(0.0, min(waits)) if waits else None


__all__ = ["BURST", "TICK", "Bucket", "Throttle", "read_rates"]
