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


def lost(outcome: DeliveryOutcome, result: Settled | None) -> bool:
    """Whether the settle left an outcome unrecorded (its claim lost): its row came back
    without a status. A failure always comes back: one that did not counts as lost too."""
    if result is None:
        return not outcome.delivered
    return result.status is None


def measure(
    label: str,
    outcome: DeliveryOutcome,
    result: Settled | None,
    tally: Counter[tuple[str, str]],
    latencies: list[float],
) -> None:
    """Count one settled outcome for the metrics (and its latency, if delivered with its
    time). ``result``: what the settle returned for it (None: recorded as delivered, no time
    asked for; ``status`` None: not recorded)."""
    if lost(outcome, result):
        tally[label, LOST] += 1
    elif outcome.delivered:
        tally[label, DELIVERED] += 1
        if result is None or result.delivered_ts is None:
            return
        slot = slot_of(envelope_of(outcome.message))
        if slot is not None:
            latencies.append((result.delivered_ts - slot).total_seconds())
    elif result is None:
        return  # not reached: lost() above
    elif result.status == DeliveryStatus.DELIVERY_FAILED:
        tally[label, DEAD_LETTER] += 1
    else:
        tally[label, RETRY] += 1
