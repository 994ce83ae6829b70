"""How a relay counts its settled outcomes for the metrics: the outcome labels of
``dsched_deliveries_total``, a message's transport label, and the fire's slot a delivery's
latency is measured from.

The relay decides each outcome; :mod:`django_dsched.metrics.relay` counts what it is given.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from django_dsched.enums import DeliveryStatus
from django_dsched.outbox.messages import DeliveryOutcome, Message, Settled
from django_dsched.outbox.transports import Transports

# Outcome labels of dsched_deliveries_total.
DELIVERED, RETRY, DEAD_LETTER, LOST = "delivered", "retry", "dead_letter", "lost"


def slot_of(payload: dict[str, object]) -> datetime | None:
    """The fire's slot from a CloudEvent payload (``scheduledtime``), if it has one."""
    value = payload.get("scheduledtime")
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def transport_label(transports: Transports, message: Message) -> str:
    """The metrics' ``transport`` label of a message: its transport's alias."""
    try:
        transport = type(transports.for_message(message))
    except Exception:
        return "unconfigured"
    return transport.alias or transport.__name__


def envelope_of(message: Message) -> dict[str, Any]:
    """A message's decoded envelope, for its log lines and metrics; empty when its text
    cannot be decoded (nested past Python's recursion limit, say): a report of one message
    never stops a batch's others (the transport fails that message alone)."""
    try:
        payload = message.payload
    except (ValueError, RecursionError):
        return {}
    return payload if isinstance(payload, dict) else {}


def fate(outcome: DeliveryOutcome, result: Settled | None) -> str:
    """What became of an outcome, as one of the outcome labels, from what the settle
    returned for it (``result``; None: recorded as delivered, its time not asked for). A row
    without a status was not recorded (its claim lost); a failure always comes back, so one
    that did not counts as lost too."""
    if result is None:
        return DELIVERED if outcome.delivered else LOST
    if result.status is None:
        return LOST
    if outcome.delivered:
        return DELIVERED
    return DEAD_LETTER if result.status == DeliveryStatus.DELIVERY_FAILED else RETRY


def measure(
    label: str,
    kind: str,
    outcome: DeliveryOutcome,
    result: Settled | None,
    tally: Counter[tuple[str, str]],
    latencies: list[float],
) -> None:
    """Count one settled outcome (its :func:`fate`: ``kind``) for the metrics, and its
    latency if delivered with its time."""
    tally[label, kind] += 1
    if kind == DELIVERED and result is not None and result.delivered_ts is not None:
        slot = slot_of(envelope_of(outcome.message))
        if slot is not None:
            latencies.append((result.delivered_ts - slot).total_seconds())
