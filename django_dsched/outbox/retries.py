"""What a failed send becomes: its error as ``last_error`` says it, and when it is tried again
(a jittered exponential delay, at least what the destination asked for within the cap)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.models.validators import make_storable_text
from django_dsched.outbox.claims import ERROR_MAX_CHARS
from django_dsched.outbox.messages import DeliveryOutcome, Message


def describe(exc: BaseException) -> str:
    """A failed send's error as ``last_error`` says it: ``Type: message``, or the type alone,
    storable (NUL and lone surrogates escaped) and at most ``ERROR_MAX_CHARS`` long.

    The exception comes from a transport or a handler: its text may hold anything an
    endpoint sent, and its ``str()`` may itself raise, which must not stop the relay.
    """
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception as failure:
        return f"{name} (its message could not be read: {type(failure).__name__})"
    return make_storable_text(f"{name}: {text}" if text else name, ERROR_MAX_CHARS)


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Delay before retrying a message whose ``attempt``-th delivery failed.

    ``min(cap, base * 2**(attempt-1))``, jittered uniformly down to half of it, so retries
    of messages that failed together spread out but never come sooner than half the step.
    """
    exponent = min(max(attempt, 1) - 1, 60)
    delay = min(cap, base * 2.0**exponent)
    return random.uniform(delay / 2, delay)


@dataclass(frozen=True)
class Retries:
    """A relay's retries: ``base`` seconds after a first failed attempt, doubling with each
    attempt up to ``cap`` (``DSCHED_RELAY_RETRY_BASE``, ``DSCHED_RELAY_RETRY_MAX``)."""

    base: float
    cap: float

    def delay(self, message: Message) -> float:
        return retry_delay(message.attempt, self.base, self.cap)

    def outcome(
        self,
        message: Message,
        exc: BaseException | None,
        started: float | None = None,
        ended: float | None = None,
    ) -> DeliveryOutcome:
        if exc is None:
            return DeliveryOutcome(message, started=started, ended=ended)
        error = describe(exc)
        delay = self.delay(message)
        asked = exc.retry_after if isinstance(exc, DeliveryError) else None
        if asked is not None:  # the destination's Retry-After: at least that, within RETRY_MAX
            delay = min(self.cap, max(delay, asked))
        return DeliveryOutcome(
            message,
            error=error,
            permanent=isinstance(exc, PermanentDeliveryError),
            delay=delay,
            started=started,
            ended=ended,
        )
