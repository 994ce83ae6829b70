"""Liveness and readiness endpoints of a ``run_scheduler`` / ``run_relay`` process.

``--health-port`` starts :class:`HealthServer`, served by one thread
(:class:`~django_dsched.runtime.http.EndpointServer`: non-blocking sockets, a deadline per
connection, and past the cap the oldest idle connection is dropped, never the new one), that
reads the loops' state (never the database: a probe must not queue behind the loop's work
or hold a connection):

- ``GET /livez``: 200 while every loop went round within ``DSCHED_HEALTH_STALL_SECONDS``
  (the loops sleep at most their poll interval, and back off at most
  ``DSCHED_RECONNECT_MAX_SECONDS`` while the database is away), else 503: the process is
  stuck and may be restarted. No number of idle or slow clients makes it fail.
- ``GET /readyz``: 200 when every loop can work: its last round reached the database and,
  for a scheduler, it leads with a trusted lease or stands by with a fresh presence
  heartbeat (``Scheduler.readiness``); 503 with the reason otherwise (while reconnecting).
  A reason is a summary, then (after ``": "``) its detail: the hosts of the database URL,
  the database's error. The port has no authentication, so the detail is shown only with
  ``DSCHED_HEALTH_DETAIL``; the logs have it always.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from django_dsched.conf import app_settings
from django_dsched.runtime.http import (
    MAX_CONNECTIONS,
    READ_TIMEOUT,
    EndpointServer,
    Request,
    Response,
    text,
)

__all__ = ["MAX_CONNECTIONS", "READ_TIMEOUT", "Checked", "HealthServer", "liveness", "readiness"]


class Checked(Protocol):
    """What the endpoints read of a loop (``DatabaseLoop`` has all of it).

    ``readiness()`` gives whether the loop is ready and why: a summary naming no host, user
    or address, optionally followed by ``": "`` and the detail (which may)."""

    kind: str
    last_tick: float

    def readiness(self) -> tuple[bool, str]: ...


def liveness(loops: Sequence[Checked], stall_seconds: float) -> tuple[bool, str]:
    """Whether every loop ticked within ``stall_seconds`` (monotonic clock)."""
    now = time.monotonic()
    lines, live = [], True
    for loop in loops:
        age = now - loop.last_tick
        ok = age <= stall_seconds
        live = live and ok
        lines.append(f"{loop.kind}: {'ok' if ok else 'stalled'}, last round {age:.1f}s ago")
    return live, "\n".join(lines)


def summary(why: str) -> str:
    """A readiness reason without its detail (what follows its first ``": "``)."""
    return why.split(": ", 1)[0]


def readiness(loops: Sequence[Checked], *, detail: bool = True) -> tuple[bool, str]:
    """Whether every loop is ready, with each one's reason (``detail``: in full)."""
    lines, ready = [], True
    for loop in loops:
        ok, why = loop.readiness()
        ready = ready and ok
        shown = why if detail else summary(why)
        lines.append(f"{loop.kind}: {'ready' if ok else 'not ready'}: {shown}")
    return ready, "\n".join(lines)


class HealthServer:
    """Serves ``/livez`` and ``/readyz`` for ``loops`` on ``address:port`` (0: any free
    port; ``port`` tells which) until :meth:`stop`; connections bounded in time
    (``read_timeout`` seconds to ask, as long to take the answer) and number
    (``max_connections``, the oldest idle dropped past it). ``detail``: whether ``/readyz``
    shows the detail of its reasons (None: ``DSCHED_HEALTH_DETAIL``, read at each probe)."""

    def __init__(
        self,
        loops: Sequence[Checked],
        port: int,
        address: str,
        stall_seconds: float,
        *,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        detail: bool | None = None,
    ) -> None:
        def answer(check: tuple[bool, str]) -> Response:
            ok, body = check
            return text(200 if ok else 503, body)

        def ready(request: Request) -> Response:
            shown = app_settings.HEALTH_DETAIL if detail is None else detail
            return answer(readiness(loops, detail=bool(shown)))

        self.server = EndpointServer(
            address,
            port,
            {"/livez": lambda request: answer(liveness(loops, stall_seconds)), "/readyz": ready},
            name="dsched-health",
            timeout=read_timeout,
            max_connections=max_connections,
        )
        self.port: int = self.server.port

    def start(self) -> HealthServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
