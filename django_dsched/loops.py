"""Pieces shared by the long-running loops (``Scheduler`` and ``Relay``)."""

from __future__ import annotations

import os
import random
import socket


def default_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Backoff:
    """Exponential backoff with full jitter, for database outages."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.base * 2**self.attempt)
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


def first_line(exc: BaseException) -> str:
    """An exception's first line, for one-line log messages."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Delay before retrying a message whose ``attempt``-th delivery failed.

    ``min(cap, base * 2**(attempt-1))``, jittered uniformly down to half of it, so retries
    of messages that failed together spread out but never come sooner than half the step.
    """
    exponent = min(max(attempt, 1) - 1, 60)
    delay = min(cap, base * 2.0**exponent)
    return random.uniform(delay / 2, delay)
