"""Transports: where the relay sends outbox messages, chosen per topic in DSCHED_TRANSPORTS."""

from __future__ import annotations

from django_dsched.outbox.transports.base import DeliveryError, PermanentDeliveryError, Transport
from django_dsched.outbox.transports.registry import ALIASES, TransportConfigError, Transports

__all__ = [
    "ALIASES",
    "DeliveryError",
    "PermanentDeliveryError",
    "Transport",
    "TransportConfigError",
    "Transports",
]
