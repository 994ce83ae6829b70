"""What a relay says of its deliveries: its stats, its log lines and its metrics.

The log lines are the relay's (logger ``django_dsched.outbox.relay``, docs/delivery.md).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_dsched.outbox.messages import DeliveryOutcome, Message
from django_dsched.outbox.outcomes import Recorded
from django_dsched.outbox.tally import (
    DEAD_LETTER,
    DELIVERED,
    LOST,
    envelope_of,
    fate,
    measure,
    transport_label,
)
from django_dsched.outbox.transports import Transports
from django_dsched.runtime.logs import get_logger

if TYPE_CHECKING:
    from django_dsched.metrics.relay import RelayMetrics  # needs prometheus_client

logger = get_logger("django_dsched.outbox.relay")


@dataclass
class RelayStats:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lost_claims: int = 0
    # Messages of an open circuit given back until it ends, the attempt not counted.
    deferred: int = 0
    # Outcomes the database refused: recorded as a failed attempt instead, or (unrecorded)
    # not even that.
    refused: int = 0
    unrecorded: int = 0
    released: int = 0
    batches: int = 0
    db_errors: int = 0


def log_context(relay_id: str, message: Message) -> dict[str, Any]:
    """The fields a JSON log line about a delivery carries (django_dsched.runtime.logs)."""
    return {
        "instance": relay_id,
        "message_id": str(message.id),
        "topic": message.topic,
        "attempt": message.attempt,
        "schedule": envelope_of(message).get("subject"),
        "slot": envelope_of(message).get("scheduledtime"),
    }


class Reports:
    """One relay's stats, logs and metrics (``metrics`` None: metrics off) of its outcomes."""

    def __init__(
        self,
        relay_id: str,
        max_attempts: int,
        transports: Transports,
        stats: RelayStats,
        metrics: RelayMetrics | None,
    ) -> None:
        self.relay_id = relay_id
        self.max_attempts = max_attempts
        self.transports = transports
        self.stats = stats
        # Prometheus series to feed (None: metrics off; see django_dsched.metrics).
        self.metrics = metrics
        # The transport of each message sent and not recorded yet, for the metrics' labels
        # (written by the send threads).
        self._labels: dict[uuid.UUID, str] = {}
        self._lock = threading.Lock()

    def attempted(self, chunk: Sequence[Message]) -> None:
        """Count a chunk handed to its transport (the metrics' attempts; a send thread)."""
        if self.metrics is not None:
            label = transport_label(self.transports, chunk[0])
            self.metrics.attempted(label, len(chunk))
            with self._lock:
                self._labels.update((m.id, label) for m in chunk)

    def take_labels(self) -> dict[uuid.UUID, str]:
        """The transport labels of the chunks attempted since the last call."""
        with self._lock:
            labels, self._labels = self._labels, {}
        return labels

    def dead_at_claim(self, dead: list[Message], why: Mapping[uuid.UUID, str]) -> None:
        """Log and count the messages a claim dead-lettered (``why``: each one's error, as
        the claim stored it)."""
        for message in dead:
            self.stats.dead_lettered += 1
            logger.error(
                "dead-lettered at its claim id=%s topic=%s type=%s: %s",
                message.id,
                message.topic,
                message.event_type,
                why.get(message.id, ""),
                extra=log_context(self.relay_id, message),
            )
        if dead and self.metrics is not None:
            tally = Counter((transport_label(self.transports, m), DEAD_LETTER) for m in dead)
            self.metrics.settled(tally, ())

    def recorded(self, recorded: Recorded, labels: dict[uuid.UUID, str]) -> None:
        """Stats, logs and metrics of recorded outcomes."""
        self._refusals(recorded.refused, recorded.unrecorded)
        by_id = {s.id: s for s in recorded.settled}
        delivered = 0
        tally: Counter[tuple[str, str]] | None = Counter() if self.metrics is not None else None
        latencies: list[float] = []
        debug = logger.isEnabledFor(logging.DEBUG)
        for outcome in [*recorded.outcomes, *recorded.unrecorded.values()]:
            message = outcome.message
            result = by_id.get(message.id)
            unrecorded = message.id in recorded.unrecorded
            kind = LOST if unrecorded else fate(outcome, result)
            if tally is not None:
                label = labels.get(message.id) or transport_label(self.transports, message)
                measure(label, kind, outcome, result, tally, latencies)
            if unrecorded:
                continue  # reported above
            if kind == LOST:
                self.stats.lost_claims += 1
                logger.warning(
                    "outcome of id=%s topic=%s not recorded: its claim expired and another "
                    "relay took it over relay=%s",
                    message.id,
                    message.topic,
                    self.relay_id,
                    extra=log_context(self.relay_id, message),
                )
            elif kind == DELIVERED:
                delivered += 1
                if debug:
                    logger.debug(
                        "delivered id=%s topic=%s type=%s attempt=%d",
                        message.id,
                        message.topic,
                        message.event_type,
                        message.attempt,
                        extra=log_context(self.relay_id, message),
                    )
            elif kind == DEAD_LETTER:
                self.stats.dead_lettered += 1
                logger.error(
                    "dead-lettered id=%s topic=%s type=%s after %d attempt(s)%s: %s",
                    message.id,
                    message.topic,
                    message.event_type,
                    message.attempt,
                    " (permanent failure)" if outcome.permanent else "",
                    outcome.error,
                    extra=log_context(self.relay_id, message),
                )
            else:
                self.stats.retried += 1
                logger.warning(
                    "delivery failed id=%s topic=%s type=%s attempt=%d/%d; retry in %.1fs: %s",
                    message.id,
                    message.topic,
                    message.event_type,
                    message.attempt,
                    self.max_attempts,
                    outcome.delay,
                    outcome.error,
                    extra=log_context(self.relay_id, message),
                )
        if tally is not None and self.metrics is not None:
            self.metrics.settled(tally, latencies)
        if delivered:
            self.stats.delivered += delivered
            logger.info(
                "delivered %d message(s) relay=%s",
                delivered,
                self.relay_id,
                extra={"instance": self.relay_id},
            )

    def _refusals(
        self,
        refused: dict[uuid.UUID, DeliveryOutcome],
        unrecorded: dict[uuid.UUID, DeliveryOutcome],
    ) -> None:
        """Log the outcomes the database refused to store (``outbox.outcomes``)."""
        for outcome in refused.values():
            self.stats.refused += 1
            logger.error(
                "the database refused the outcome of id=%s topic=%s (%s); recorded as a "
                "failed attempt instead relay=%s",
                outcome.message.id,
                outcome.message.topic,
                "delivered" if outcome.delivered else f"failed: {outcome.error}",
                self.relay_id,
                extra=log_context(self.relay_id, outcome.message),
            )
        for outcome in unrecorded.values():
            self.stats.unrecorded += 1
            logger.error(
                "the database refused the outcome of id=%s topic=%s (%s) and the failed "
                "attempt in its place: nothing recorded; its claim expires and it is sent "
                "again (dead-lettered once claimed %d times) relay=%s",
                outcome.message.id,
                outcome.message.topic,
                "delivered" if outcome.delivered else f"failed: {outcome.error}",
                self.max_attempts,
                self.relay_id,
                extra=log_context(self.relay_id, outcome.message),
            )
