"""A destination's health: a circuit breaker per destination (a route, for one host).

A destination whose sends fail ``DSCHED_RELAY_CIRCUIT_FAILURES`` times in a row (a send of
which no message went through: a timeout, a refused connection, a 5xx, a raising handler;
not a permanent failure such as a 4xx, which is the message's own) is *opened*: for
``DSCHED_RELAY_CIRCUIT_SECONDS`` (doubling each time it opens again without having closed,
up to ``DSCHED_RELAY_RETRY_MAX``) the relay sends it nothing. Its messages are kept: those
the relay holds are given back with their next attempt at the circuit's end, the attempt
not counted, and those it claims meanwhile likewise (:mod:`.dispatch`). The other
destinations are not touched. Then it is *half-open*: one send goes (a probe); if it goes
through the circuit closes, else it opens again.

A send that hangs past ``DSCHED_RELAY_MAX_RUN_SECONDS`` (given up by the heartbeat) keeps
its destination open while it hangs.

Per relay process and in memory, on the monotonic clock; each change is written to the
database for the admin's cluster page and ``dsched cluster`` (:mod:`.circuits`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half-open"


@dataclass(frozen=True)
class BreakerRules:
    """When a destination opens, and for how long (``failures`` 0: never)."""

    failures: int
    seconds: float
    max_seconds: float


@dataclass
class Breaker:
    """One destination's circuit."""

    rules: BreakerRules
    failures: int = 0  # sends failed in a row
    opened: int = 0  # times opened since it last closed
    until: float = 0.0  # open until then (monotonic)
    probing: bool = False  # the half-open probe is under way
    stuck: int = 0  # sends given up while they hang
    last_error: str = ""
    # Whether the state changed since the relay last wrote it (circuits.py).
    changed: bool = field(default=False, compare=False)

    def state(self, now: float | None = None) -> str:
        if self.stuck:
            return OPEN
        if not self.opened:
            return CLOSED
        now = time.monotonic() if now is None else now
        return OPEN if now < self.until else HALF_OPEN

    def may_send(self, now: float | None = None) -> bool:
        """Whether a send may start now (half-open: the one probe)."""
        state = self.state(now)
        return state == CLOSED or (state == HALF_OPEN and not self.probing)

    def is_open(self, now: float | None = None) -> bool:
        return self.state(now) == OPEN

    def sending(self, now: float | None = None) -> None:
        """A send starts (the probe, when half-open)."""
        if self.opened and self.state(now) == HALF_OPEN:
            self.probing = True

    def succeeded(self) -> None:
        """A send went through (at least one of its messages)."""
        was_open = bool(self.opened)
        self.failures = 0
        self.opened = 0
        self.probing = False
        self.until = 0.0
        self.changed = self.changed or was_open

    def failed(self, error: str, now: float | None = None) -> bool:
        """A send failed as a whole (retryable): whether the circuit opened now."""
        now = time.monotonic() if now is None else now
        self.failures += 1
        self.last_error = error
        probe = self.probing
        self.probing = False
        if self.rules.failures <= 0:
            return False
        if probe or (not self.opened and self.failures >= self.rules.failures):
            self._open(now)
            return True
        return False

    def hung(self, error: str, now: float | None = None) -> None:
        """A send was given up while it hangs: open while it hangs, and after it for a
        circuit's time."""
        self.stuck += 1
        self.last_error = error
        self._open(time.monotonic() if now is None else now)

    def returned(self) -> None:
        """A send given up has returned."""
        self.stuck = max(0, self.stuck - 1)
        self.changed = True

    def _open(self, now: float) -> None:
        seconds = min(self.rules.max_seconds, self.rules.seconds * 2.0 ** min(self.opened, 30))
        self.opened += 1
        self.until = now + seconds
        self.changed = True

    def seconds_left(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return max(0.0, self.until - now)
