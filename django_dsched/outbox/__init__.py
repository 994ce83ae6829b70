"""Delivery of the outbox: claims, the relay loop, transports, dead letters and retention.

``run_relay`` runs one :class:`Relay` per process; it claims pending messages
(:mod:`.claims`), hands each to the transport its topic is routed to (:mod:`.transports`),
and records the outcomes (:mod:`.outcomes`: one the database refuses cannot lose the others).
:mod:`.dead_letters` retries or discards failed messages;
:mod:`.retention` deletes old history.
"""

from __future__ import annotations

from django_dsched.outbox.relay import Relay

__all__ = ["Relay"]
