"""Liveness and readiness endpoints of a ``run_scheduler`` / ``run_relay`` process.

``--health-port`` starts :class:`HealthServer`, a small ``http.server`` on a daemon thread
that reads the loops' state (never the database: a probe must not queue behind the loop's
work or hold a connection):

- ``GET /livez``: 200 while every loop went round within ``DSCHED_HEALTH_STALL_SECONDS``
  (the loops sleep at most their poll interval, and back off at most 5 s while the
  database is away), else 503: the process is stuck and may be restarted.
- ``GET /readyz``: 200 when every loop can work: its last round reached the database and,
  for a scheduler, it leads with a trusted lease or stands by with a fresh presence
  heartbeat (``Scheduler.readiness``); 503 with the reason otherwise (while reconnecting).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol


class Checked(Protocol):
    """What the endpoints read of a loop (``DatabaseLoop`` has all of it)."""

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


def readiness(loops: Sequence[Checked]) -> tuple[bool, str]:
    """Whether every loop is ready, with each one's reason."""
    lines, ready = [], True
    for loop in loops:
        ok, why = loop.readiness()
        ready = ready and ok
        lines.append(f"{loop.kind}: {'ready' if ok else 'not ready'}: {why}")
    return ready, "\n".join(lines)


class HealthServer:
    """Serves ``/livez`` and ``/readyz`` for ``loops`` on ``address:port`` (0: any free
    port; ``port`` tells which) until :meth:`stop`."""

    def __init__(
        self, loops: Sequence[Checked], port: int, address: str, stall_seconds: float
    ) -> None:
        checks = {
            "/livez": lambda: liveness(loops, stall_seconds),
            "/readyz": lambda: readiness(loops),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    ok, text = False, "not found: use /livez or /readyz"
                    status = 404
                else:
                    ok, text = check()
                    status = 200 if ok else 503
                body = (text + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would flood the logs

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="dsched-health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
