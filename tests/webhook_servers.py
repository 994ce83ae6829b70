"""Local endpoints for webhook tests: a scripted HTTP sink, a byte-dribbling TCP server, and a
name resolver stub (no test touches the network or the system resolver)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


class Sink(BaseHTTPRequestHandler):
    """A local HTTP endpoint whose behaviour is chosen by the request path."""

    requests: list[tuple[str, dict, bytes]] = []
    server_version = "sink"

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Sink.requests.append((self.path, dict(self.headers), body))
        path, _, query = self.path.partition("?")
        params = {k: v[0] for k, v in parse_qs(query).items()}
        if path.startswith("/ok") or path.startswith("/hooks"):
            self._reply(204)
        elif path == "/fail":
            self._reply(503, b"try later")
        elif path == "/nul":
            # A NUL byte in the body (so in the error's excerpt): PostgreSQL text cannot hold it.
            self._reply(int(params.get("status", 500)), b"bad\x00reply")
        elif path == "/gone":
            self._reply(410, b"no such hook", headers={"Retry-After": "5"})
        elif path == "/throttled":
            self._reply(429)
        elif path == "/retry-after":
            # ?seconds=N or ?date-in=N (an HTTP-date N seconds after the response's Date)
            now = datetime.now(UTC).replace(microsecond=0)
            if "seconds" in params:
                value = params["seconds"]
            else:
                value = format_datetime(now + timedelta(seconds=int(params["date-in"])), True)
            headers = {"Retry-After": value, "Date": format_datetime(now, True)}
            self._reply(int(params.get("status", 503)), headers=headers)
        elif path == "/slow":
            time.sleep(2)
            self._reply(200)
        elif path == "/redirect-in":
            self._reply(307, location="/ok/after-redirect")
        elif path == "/redirect-out":
            self._reply(307, location="http://unlisted.invalid/steal")
        elif path == "/redirect-to":
            self._reply(int(params.get("status", 307)), location=params["url"])
        elif path == "/redirect-get":
            self._reply(302, location="/ok")
        elif path == "/huge-error":
            self.send_response(500)
            self.send_header("Content-Length", str(50 * 1024 * 1024))
            self.end_headers()
            try:
                for _ in range(50 * 1024):
                    self.wfile.write(b"x" * 1024)
            except OSError:  # the client stopped reading, as it should
                pass
        else:
            self._reply(404)

    def _reply(self, status, body=b"", location=None, headers=None):
        try:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (a timeout test)
            pass


class SinkServer(ThreadingHTTPServer):
    request_queue_size = 64  # many connections at once are queued, not refused
    daemon_threads = True


@contextmanager
def serve_sink(handler: type[BaseHTTPRequestHandler] = Sink) -> Iterator[str]:
    """Run a :class:`Sink` (or ``handler``) on 127.0.0.1; yield its base URL."""
    server = SinkServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def dribbling_server(
    reply: bytes,
    *,
    every: float = 0.2,
    piece: int = 1,
    for_at_most: float = 15.0,
    read_request: bool = True,
) -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers each connection with ``reply``, ``piece`` bytes
    every ``every`` seconds (a hostile endpoint that never lets a per-read timeout expire),
    for at most ``for_at_most`` seconds, then hangs up. Yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def dribble(conn: socket.socket) -> None:
        with conn:
            if read_request:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
            ends = time.monotonic() + for_at_most
            try:
                for start in range(0, len(reply), piece):
                    if stop.is_set() or time.monotonic() > ends:
                        break
                    conn.sendall(reply[start : start + piece])
                    time.sleep(every)
            except OSError:  # the client closed the connection
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=dribble, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


class StubResolver:
    """``DSCHED_WEBHOOK_RESOLVER`` for tests: names → addresses from a dict, calls recorded."""

    def __init__(self, names: dict[str, list[str]], delay: float = 0.0) -> None:
        self.names = names
        self.delay = delay
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if self.delay:
            time.sleep(self.delay)
        if host not in self.names:
            raise OSError(f"stub resolver: unknown name {host}")
        return list(self.names[host])
