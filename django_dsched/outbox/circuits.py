"""The relay's open circuits in the database (``relay_circuit_t``, model
:class:`~django_dsched.models.Circuit`), for the admin's cluster page and ``dsched cluster``.

A relay writes a destination's row when its circuit opens (:mod:`.breaker`), updates it as it
goes half-open or opens again, and deletes it when it closes; at start and when it stops it
deletes all of its rows. Writes happen only when a circuit changes, on the relay's own
session, between its claims. The metrics count the open circuits of this process (no label
per destination: routes and hosts are data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_dsched.models.validators import make_storable_text
from django_dsched.outbox.breaker import CLOSED
from django_dsched.outbox.claims import ERROR_MAX_CHARS

if TYPE_CHECKING:
    from django_dsched.metrics.relay import RelayMetrics  # needs prometheus_client
    from django_dsched.outbox.dispatch import Dispatcher

UPSERT = """
INSERT INTO relay_circuit_t AS c
    (relay_id, route, host, transport, state, failures, last_error, opened_ts, until_ts)
VALUES (%(relay)s, %(route)s, %(host)s, %(transport)s, %(state)s, %(failures)s, %(error)s,
        clock_timestamp(), clock_timestamp() + make_interval(secs => %(left)s))
ON CONFLICT (relay_id, route, host) DO UPDATE
    SET state = EXCLUDED.state, failures = EXCLUDED.failures,
        last_error = EXCLUDED.last_error, until_ts = EXCLUDED.until_ts,
        transport = EXCLUDED.transport
"""
CLOSE = """
DELETE FROM relay_circuit_t
WHERE relay_id = %(relay)s AND route = %(route)s AND host = %(host)s
"""
FORGET = "DELETE FROM relay_circuit_t WHERE relay_id = %(relay)s"


class Circuits:
    """One relay's rows of ``relay_circuit_t``."""

    def __init__(self, relay_id: str, metrics: RelayMetrics | None = None) -> None:
        self.relay_id = relay_id
        self.metrics = metrics
        self._started = False  # this relay's old rows (a previous process of its id) deleted
        self.open = 0  # circuits not closed, as last written

    def write(self, dispatch: Dispatcher, connection: Any) -> None:
        """Write the circuits that changed since the last call."""
        if not self._started:
            with connection.cursor() as cursor:
                cursor.execute(FORGET, {"relay": self.relay_id})
            self._started = True
        if not dispatch.breaker_changes:
            return
        lanes = dispatch.breakers()
        with connection.cursor() as cursor:
            for lane in lanes:
                breaker = lane.breaker
                state = breaker.state()
                params = {"relay": self.relay_id, "route": lane.label, "host": lane.host or ""}
                if state == CLOSED:
                    cursor.execute(CLOSE, params)
                    continue
                transport = lane.transport
                cursor.execute(
                    UPSERT,
                    {
                        **params,
                        "transport": (transport.alias or type(transport).__name__)
                        if transport is not None
                        else "",
                        "state": state,
                        "failures": breaker.failures,
                        "error": make_storable_text(breaker.last_error, ERROR_MAX_CHARS),
                        "left": breaker.seconds_left(),
                    },
                )
        self.open = sum(1 for lane in dispatch.lanes.values() if lane.breaker.state() != CLOSED)
        if self.metrics is not None:
            self.metrics.circuits(self.open)

    def forget(self, connection: Any) -> None:
        """Delete this relay's rows (it stops)."""
        self.open = 0
        if self.metrics is not None:
            self.metrics.circuits(0)
        if self._started:
            with connection.cursor() as cursor:
                cursor.execute(FORGET, {"relay": self.relay_id})
