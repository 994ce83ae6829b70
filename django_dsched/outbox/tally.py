"""How a relay counts its settled outcomes for the metrics: the outcome labels of
``dsched_deliveries_total`` and the fire's slot a delivery's latency is measured from.

The relay decides each outcome; :mod:`django_dsched.metrics.relay` counts what it is given.
"""

from __future__ import annotations

from datetime import datetime

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
