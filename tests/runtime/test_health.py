"""The health server's connections are bounded (issue 23): idle and dribbling clients are
closed after the read timeout, and past the cap a connection gets no thread. Real sockets
against a real HealthServer; every wait is for a state, bounded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from django_dsched.runtime.health import HealthServer
from tests.endpoints import get
from tests.helpers import wait_for

TIMEOUT = 0.5  # the server's read timeout in these tests
CAP = 4


class Ticking:
    """A loop that went round just now and is ready (what the endpoints read of a loop)."""

    kind = "relay"

    @property
    def last_tick(self) -> float:
        return time.monotonic()

    def readiness(self) -> tuple[bool, str]:
        return True, "connected"


@pytest.fixture
def server() -> Iterator[HealthServer]:
    started = HealthServer(
        [Ticking()], 0, "127.0.0.1", 30.0, read_timeout=TIMEOUT, max_connections=CAP
    ).start()
    yield started
    started.stop()


class Client:
    """A raw connection to the server, and what it has received."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.received = bytearray()

    def closed_by_server(self) -> bool:
        """Whether the server has closed the connection (read what came, without waiting)."""
        try:
            while chunk := self.sock.recv(4096):
                self.received += chunk
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


def answered(port: int, path: str) -> tuple[int, str] | None:
    """(status, body) of a GET, or None while the server is busy (503 for the cap)."""
    status, body = get(port, path, timeout=2)
    return None if status == 503 and "too many connections" in body else (status, body)


def test_idle_connections_cannot_grow_the_threads_and_livez_still_answers(server):
    before = threading.active_count()
    peak = before
    clients = []
    try:
        for _ in range(100):
            clients.append(Client(server.port))
            peak = max(peak, threading.active_count())

        def all_closed() -> bool:
            nonlocal peak
            peak = max(peak, threading.active_count())
            return all(client.closed_by_server() for client in clients)

        # Past the cap, answered 503 at once; the first CAP after the read timeout.
        wait_for(all_closed, what="the server to close every idle connection")
        assert peak <= before + CAP, f"{peak - before} threads for 100 idle connections"
        busy = [c for c in clients if c.received.startswith(b"HTTP/1.0 503 ")]
        assert len(busy) >= 100 - CAP and all(b"too many connections" in c.received for c in busy)
        # The idle clients still hold their sockets open: a probe is answered.
        status, body = wait_for(lambda: answered(server.port, "/livez"), what="/livez")
        assert status == 200 and "relay: ok" in body
    finally:
        for client in clients:
            client.close()


def test_a_probe_is_answered_while_idle_connections_under_the_cap_are_held(server):
    idle = [Client(server.port) for _ in range(CAP - 1)]
    try:
        wait_for(lambda: server.server.connections == CAP - 1, what="idle connections served")
        assert get(server.port, "/readyz", timeout=2) == (200, "relay: ready: connected\n")
        assert not any(client.closed_by_server() for client in idle)
    finally:
        for client in idle:
            client.close()


def test_an_idle_connection_is_closed_after_the_read_timeout(server):
    client = Client(server.port)
    opened = time.monotonic()
    try:
        wait_for(lambda: server.server.connections == 1, what="the connection served")
        assert not client.closed_by_server()  # the server waits for a request...
        wait_for(client.closed_by_server, what="the idle connection closed")
        assert time.monotonic() - opened >= TIMEOUT * 0.9  # ...for the read timeout
        assert client.received == b""
        wait_for(lambda: server.server.connections == 0, what="its thread done")
    finally:
        client.close()


def test_a_dribbling_client_is_closed_by_the_deadline(server):
    """A byte every 0.1 s never lets one read wait the timeout: the connection's deadline
    (its TIMEOUT since it was accepted) closes it all the same."""
    client = Client(server.port)
    opened = time.monotonic()
    sent = 0

    def dribbled_until_closed() -> bool:
        nonlocal sent
        if client.closed_by_server():
            return True
        due = int((time.monotonic() - opened) / 0.1)
        try:
            while sent < due:
                client.sock.send(b"GET /livez"[sent % 10 : sent % 10 + 1])
                sent += 1
        except OSError:  # shut down under us: closed
            return True
        return False

    try:
        wait_for(dribbled_until_closed, what="the dribbling connection closed")
        # Closed by the sweep after TIMEOUT (it runs every 0.5 s), while bytes still came.
        assert sent >= TIMEOUT / 0.1 - 1
        wait_for(lambda: server.server.connections == 0, what="its thread done")
    finally:
        client.close()
