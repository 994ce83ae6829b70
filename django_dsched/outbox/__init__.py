"""Delivery of the outbox: claims, the relay loop, transports, dead letters and retention.

``run_relay`` runs one :class:`Relay` per process; it claims pending messages
(:mod:`.claims`), hands each to the transport its topic is routed to (:mod:`.transports`),
and records the outcomes (:mod:`.outcomes`: one the database refuses cannot lose the others).

- :mod:`.relay`: the ``run_relay`` loop: claim, hand to the sends, settle, give back.
- :mod:`.dispatch`: concurrent sends on threads, within the relay's, each host's and each
  destination's limits; :mod:`.lanes`: one destination's (a route, for one host) messages.
- :mod:`.breaker`: a destination's circuit (held back after sends failed in a row);
  :mod:`.circuits`: the open ones, written for the admin and ``dsched cluster``.
- :mod:`.claims`: the relay's claim and settle statements, and what they return.
- :mod:`.holding`: keeping claims (extend) and giving them back (release, defer).
- :mod:`.refused`: the rows the database refuses to claim, extend or release, found in halves.
- :mod:`.quarantine`: the messages a relay passes over (refused even as dead letters).
- :mod:`.pace`: how many rows the next claim asks for, from the last claim's bytes.
- :mod:`.retries`: what a failed send becomes: its error text and its retry delay.
- :mod:`.outcomes`: a batch's outcomes recorded so that a refused one loses no other.
- :mod:`.reports`: the relay's stats, log lines and metrics of its deliveries.
- :mod:`.tally`: the metrics' outcome labels, transport label and slot (the latency's start).
- :mod:`.heartbeat`: renewing every claim the relay holds from a thread of its own.
- :mod:`.phases`: a delivery's phases and the worker-side hooks that report them.
- :mod:`.handlers`: in-process handlers registered for a topic or an event type.
- :mod:`.transports`: where messages go (one module per transport), routed per topic.
- :mod:`.coverage`: the topics and event types of schedules nobody would deliver.
- :mod:`.dead_letters`: retrying or discarding failed messages.
- :mod:`.retention`: deleting old history.
"""

from __future__ import annotations

from django_dsched.outbox.relay import Relay

__all__ = ["Relay"]
