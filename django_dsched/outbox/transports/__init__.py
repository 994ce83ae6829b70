"""Transports: where the relay sends outbox messages, chosen per topic in DSCHED_TRANSPORTS."""

from __future__ import annotations

from django_dsched.exceptions import DeliveryError, PermanentDeliveryError, TransportConfigError
from django_dsched.outbox.transports.base import Transport
from django_dsched.outbox.transports.registry import ALIASES, Transports

__all__ = [
    "ALIASES",
    "DeliveryError",
    "PermanentDeliveryError",
    "Transport",
    "TransportConfigError",
    "Transports",
]
