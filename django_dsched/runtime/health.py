"""Liveness and readiness endpoints of a ``run_scheduler`` / ``run_relay`` process.

``--health-port`` starts :class:`HealthServer`, a small ``http.server`` on a daemon thread
that reads the loops' state (never the database: a probe must not queue behind the loop's
work or hold a connection):

- ``GET /livez``: 200 while every loop went round within ``DSCHED_HEALTH_STALL_SECONDS``
  (the loops sleep at most their poll interval, and back off at most
  ``DSCHED_RECONNECT_MAX_SECONDS`` while the database is away), else 503: the process is
  stuck and may be restarted.
- ``GET /readyz``: 200 when every loop can work: its last round reached the database and,
  for a scheduler, it leads with a trusted lease or stands by with a fresh presence
  heartbeat (``Scheduler.readiness``); 503 with the reason otherwise (while reconnecting).

A connection costs a thread while it is served, so connections are bounded
(:class:`BoundedHTTPServer`): each has ``READ_TIMEOUT`` seconds to send its request and be
answered, then it is closed (an idle or dribbling client holds nothing longer), and at most
``MAX_CONNECTIONS`` are served at once; one more is answered 503 and closed at once, without
a thread.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

# Seconds a connection has to send its request and be answered (a probe takes milliseconds).
READ_TIMEOUT = 2.0
# Connections served at once, a thread each (probes come one at a time, every few seconds).
MAX_CONNECTIONS = 16
# Connections the kernel queues until they are accepted: a burst is accepted and, past
# MAX_CONNECTIONS, answered at once, instead of waiting in a short queue.
ACCEPT_QUEUE = 128

BUSY_BODY = b"busy: too many connections\n"
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(BUSY_BODY)).encode() + b"\r\n"
    b"Cache-Control: no-store\r\nConnection: close\r\n\r\n" + BUSY_BODY
)


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


class BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, for at most ``max_connections`` connections at once and at
    most ``timeout`` seconds each.

    Each read of a request waits at most ``timeout`` (the handler's socket timeout), and a
    connection still open ``timeout`` seconds after it was accepted (a client sending a byte
    now and then) is shut down by the serving thread's sweep (``service_actions``, every
    poll of ``serve_forever``). A connection past the cap is answered 503 and closed by the
    accepting thread; it never gets a thread.
    """

    daemon_threads = True
    block_on_close = False  # stop() never waits on a client
    request_queue_size = ACCEPT_QUEUE

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        timeout: float,
        max_connections: int,
    ) -> None:
        self.connection_timeout = timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        # The connections being served, each with when it is shut down at the latest.
        self._deadlines: dict[socket.socket, float] = {}
        super().__init__(address, handler)

    @property
    def connections(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._deadlines)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        with self._lock:
            self._deadlines[request] = time.monotonic() + self.connection_timeout
        try:
            super().process_request(request, client_address)  # starts its thread
        except BaseException:
            self._forget(request)
            self.shutdown_request(request)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._forget(request)  # the sweep no longer touches it: it may be closed
            self.shutdown_request(request)
            self._slots.release()

    def service_actions(self) -> None:
        """Shut down the connections past their deadline (their threads then end)."""
        now = time.monotonic()
        with self._lock:  # held, so that no connection is closed under the shutdown
            for request, deadline in self._deadlines.items():
                if deadline <= now:
                    try:
                        request.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away, or its connection was shut down at its deadline
        super().handle_error(request, client_address)

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._deadlines.pop(request, None)

    def _refuse(self, request: Any) -> None:
        """Answer 503 if the socket takes it at once, and close."""
        try:
            request.setblocking(False)
            request.send(BUSY)
        except OSError:
            pass
        self.shutdown_request(request)


class HealthServer:
    """Serves ``/livez`` and ``/readyz`` for ``loops`` on ``address:port`` (0: any free
    port; ``port`` tells which) until :meth:`stop`; connections bounded in time
    (``read_timeout`` seconds) and number (``max_connections``)."""

    def __init__(
        self,
        loops: Sequence[Checked],
        port: int,
        address: str,
        stall_seconds: float,
        *,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        checks = {
            "/livez": lambda: liveness(loops, stall_seconds),
            "/readyz": lambda: readiness(loops),
        }

        class Handler(BaseHTTPRequestHandler):
            timeout = read_timeout  # each read of the request; then the connection closes

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

        self.server = BoundedHTTPServer(
            (address, port), Handler, timeout=read_timeout, max_connections=max_connections
        )
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
