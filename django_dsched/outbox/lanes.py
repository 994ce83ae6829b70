"""A destination's lane in a relay: the messages of one route for one host, waiting to be sent,
the sends under way, and what they measured.

A route (an entry of ``DSCHED_TRANSPORTS`` or of a host's table) is one destination per host
(its ``{host}`` makes it so, and tenants are kept apart), so each (route, host) has a lane of
its own: sent by up to the route's ``CONCURRENCY`` sends at once (:func:`concurrency`), with a
circuit breaker of its own (:mod:`.breaker`). One host's lanes together are bound by
``DSCHED_RELAY_HOST_CONCURRENCY``, and a relay's by ``DSCHED_RELAY_CONCURRENCY``
(:mod:`.dispatch`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django_dsched.outbox.breaker import Breaker
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports import Transport

# A lane holds (queued, not sent yet) about this many seconds of sending at its measured pace,
# and at least two rounds of its sends: claims pass over its messages beyond that (other
# relays take them), and a relay gives back what it holds beyond twice that and TRIM_FLOOR.
QUEUE_SECONDS = 1.0
TRIM_FLOOR = 100
# How much a new measurement of a lane's pace counts (an exponential moving average).
PACE_WEIGHT = 0.3


def concurrency(entry: Mapping[str, Any], transport: type[Transport] | Transport) -> int:
    """Sends at once to one route for one host: the entry's ``CONCURRENCY``, else the
    transport's default."""
    value = entry.get("CONCURRENCY")
    return max(1, int(value)) if isinstance(value, int) else max(1, transport.concurrency)


@dataclass(eq=False)
class Lane:
    """One destination's messages in one relay."""

    key: tuple[Any, str | None]  # (route, host)
    label: str  # the route as settings name it, for logs and the cluster page
    transport: Transport | None
    limit: int  # sends at once
    breaker: Breaker
    queue: deque[Message] = field(default_factory=deque)
    topics: set[str] = field(default_factory=set)  # of the messages queued
    sending: int = 0  # sends under way
    # Seconds one send slot takes per message (0: not measured yet).
    seconds_per_message: float = 0.0

    @property
    def host(self) -> str | None:
        return self.key[1]

    @property
    def batch(self) -> int:
        return max(1, self.transport.batch_size) if self.transport is not None else 1

    def room(self) -> int:
        """Messages to keep queued: about :data:`QUEUE_SECONDS` of sending, at least two
        rounds of sends."""
        floor = 2 * self.limit * self.batch
        if self.seconds_per_message <= 0:
            return floor
        return max(floor, int(QUEUE_SECONDS * self.limit / self.seconds_per_message))

    def full(self) -> bool:
        return len(self.queue) >= self.room()

    def excess(self) -> int:
        """Messages queued beyond what the lane should hold (0 until its pace is known)."""
        if self.seconds_per_message <= 0 or len(self.queue) <= max(2 * self.room(), TRIM_FLOOR):
            return 0
        return len(self.queue) - self.room()

    def take(self, run: int = 1) -> list[Message]:
        """The next job's messages, oldest first: a chunk of the transport's batch, or for a
        transport that sends one per call, a run of up to ``run``."""
        size = self.batch if self.batch > 1 else run
        chunk = [self.queue.popleft() for _ in range(min(size, len(self.queue)))]
        if not self.queue:
            self.topics.clear()
        return chunk

    def measured(self, messages: int, seconds: float) -> None:
        """A send of ``messages`` took ``seconds``."""
        if messages <= 0:
            return
        sample = max(seconds, 1e-6) / messages
        if self.seconds_per_message <= 0:
            self.seconds_per_message = sample
        else:
            self.seconds_per_message += PACE_WEIGHT * (sample - self.seconds_per_message)


@dataclass
class Job:
    """One send under way: a lane's chunk, since when (monotonic)."""

    lane: Lane
    messages: list[Message]
    started: float = field(default_factory=time.monotonic)
    given_up: bool = False  # the heartbeat gave its claims up (it hung)
    # The messages it sends (its own, less those reported lost), and how many of them went
    # to the transport so far: those after, given back at once if it hangs.
    todo: list[Message] = field(default_factory=list)
    handed: int = 0
