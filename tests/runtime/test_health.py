"""No client can starve the health endpoints (issues 23 and 39): one thread serves every
connection, idle and dribbling ones are closed at their deadline, and past the cap the
oldest idle connection is dropped instead of the new one, so ``/livez`` answers 200 however
many connections are held. ``/readyz`` names no host unless the operator asks. Real sockets
against a real HealthServer; every wait is for a state, bounded."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from django_dsched.runtime.health import MAX_CONNECTIONS, HealthServer
from tests.endpoints import get
from tests.helpers import wait_for

TIMEOUT = 0.5  # the server's read timeout in the tests that wait for it
CAP = 4
HELD = 1000
ATTACKER = "127.0.0.2"  # another address of the loopback interface
# A reason as a loop gives it while the database is away: a summary, then the detail.
AWAY = (
    'not connected to the database: db-1.internal:5432: password authentication failed for '
    'user "dsched"; 10.0.0.7:5432: Connection refused'
)  # fmt: skip


class Ticking:
    """A loop that went round just now (what the endpoints read of a loop)."""

    kind = "relay"

    def __init__(self, ready: tuple[bool, str] = (True, "connected")) -> None:
        self.answer = ready

    @property
    def last_tick(self) -> float:
        return time.monotonic()

    def readiness(self) -> tuple[bool, str]:
        return self.answer


@pytest.fixture
def server() -> Iterator[HealthServer]:
    started = HealthServer(
        [Ticking()], 0, "127.0.0.1", 30.0, read_timeout=TIMEOUT, max_connections=CAP
    ).start()
    yield started
    started.stop()


@pytest.fixture
def descriptors() -> None:
    """Room for the held connections' two ends in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * HELD + 512
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class Client:
    """A raw connection to the server (from ``source``, an address of this host), and what
    it has received."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), 5, (source, 0))
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


def probes(port: int, count: int, path: str = "/livez") -> list[tuple[int, str]]:
    """``count`` probes in a row, each with a kubelet-like timeout."""
    return [get(port, path, timeout=2) for _ in range(count)]


def test_a_thousand_idle_connections_held_never_fail_a_liveness_probe(descriptors):
    """The shipped bounds (2 s, 64 connections): 1,000 connections opened and held idle.
    The server keeps the newest 64 and drops the oldest, with no thread of its own for any:
    every probe in a row, while they are held, is answered 200."""
    health = HealthServer([Ticking()], 0, "127.0.0.1", 30.0).start()
    before = threading.active_count()
    held: list[Client] = []
    try:
        held = [Client(health.port) for _ in range(HELD)]
        answers = probes(health.port, 10)
        assert [status for status, _ in answers] == [200] * 10, answers
        assert all("relay: ok" in body for _, body in answers)
        assert threading.active_count() == before
        assert health.server.connections <= MAX_CONNECTIONS
        wait_for(lambda: health.server.dropped >= HELD - MAX_CONNECTIONS, what="drops")
        # Every one dropped was idle: none got an answer, so none was refused.
        dropped = [c for c in held if c.closed_by_server()]
        assert len(dropped) >= HELD - MAX_CONNECTIONS and not any(c.received for c in dropped)
    finally:
        for client in held:
            client.close()
        health.stop()


def test_a_thousand_idle_connections_under_the_cap_cost_no_thread(descriptors):
    """Raise the cap past them and they are all served at once, by the one thread."""
    health = HealthServer(
        [Ticking()], 0, "127.0.0.1", 30.0, read_timeout=60, max_connections=2 * HELD
    ).start()
    before = threading.active_count()
    held: list[Client] = []
    try:
        held = [Client(health.port) for _ in range(HELD)]
        wait_for(lambda: health.server.connections == HELD, what="every connection accepted")
        answers = probes(health.port, 5) + probes(health.port, 5, "/readyz")
        assert [status for status, _ in answers] == [200] * 10, answers
        assert threading.active_count() == before
        wait_for(lambda: health.server.connections == HELD, what="the probes' connections gone")
        assert health.server.dropped == 0
        assert not any(client.closed_by_server() for client in held)
    finally:
        for client in held:
            client.close()
        health.stop()


def test_clients_reconnecting_past_the_cap_never_fail_a_probe(server):
    """The review's attack: more sockets than the cap from one address (127.0.0.2), each
    reopened as soon as the server closes it. Each newcomer pushes out an idle connection of
    the address holding the most: the attacker's own, never the probe (from 127.0.0.1)."""
    sockets = [Client(server.port, ATTACKER) for _ in range(6 * CAP)]
    stop = threading.Event()
    reopened = 0

    def hold() -> None:
        nonlocal reopened
        while not stop.wait(0.01):
            for index, client in enumerate(sockets):
                if client.closed_by_server():
                    client.close()
                    sockets[index] = Client(server.port, ATTACKER)
                    reopened += 1

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        wait_for(lambda: reopened >= 6 * CAP, what="the attackers reconnecting")
        during = reopened
        answers = probes(server.port, 20)
        assert [status for status, _ in answers] == [200] * 20, [a for a in answers if a[0] != 200]
        assert reopened > during  # they kept coming meanwhile
    finally:
        stop.set()
        holder.join(5)
        for client in sockets:
            client.close()


# A client process: holds 60 idle connections, then probes /livez 5 times.
HOLD_THEN_PROBE = """
import socket, sys, urllib.request
port = int(sys.argv[1])
sys.stdin.readline()
held = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(60)]
for _ in range(5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as answer:
        print(answer.status, flush=True)
"""


def test_out_of_file_descriptors_an_idle_connection_makes_room_for_a_probe():
    """With no cap to speak of, the process's descriptor limit is the bound: an accept that
    finds none free closes the oldest idle connection and tries again."""
    health = HealthServer(
        [Ticking()], 0, "127.0.0.1", 30.0, read_timeout=30, max_connections=10_000
    ).start()
    client = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_PROBE, str(health.port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    taken, limit, free = {int(fd) for fd in os.listdir("/proc/self/fd")}, 0, 0
    while free < 16:  # descriptors are numbered from the lowest free one, below the limit
        free += limit not in taken
        limit += 1
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        assert client.stdin is not None
        client.stdin.write("go\n")
        client.stdin.flush()
        output, _ = client.communicate(timeout=60)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        client.kill()
        health.stop()
    assert output.split() == ["200"] * 5, output
    assert health.server.dropped > 0


def test_past_the_cap_the_oldest_idle_connection_is_dropped_not_the_new_one(server):
    idle = [Client(server.port) for _ in range(CAP)]
    try:
        wait_for(lambda: server.server.connections == CAP, what="idle connections served")
        newcomer = Client(server.port)
        newcomer.sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_for(newcomer.closed_by_server, what="the newcomer answered")
        assert newcomer.received.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"relay: ok" in newcomer.received
        assert idle[0].closed_by_server() and idle[0].received == b""
        assert not any(client.closed_by_server() for client in idle[1:])
        newcomer.close()
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
        wait_for(lambda: server.server.connections == 0, what="the connection forgotten")
    finally:
        client.close()


def test_a_dribbling_client_is_closed_by_the_deadline(server):
    """A byte every 0.1 s keeps the connection busy: its deadline (TIMEOUT from its accept)
    closes it all the same."""
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
        except OSError:  # closed under us
            return True
        return False

    try:
        wait_for(dribbled_until_closed, what="the dribbling connection closed")
        assert TIMEOUT / 0.1 - 1 <= sent <= 3 * TIMEOUT / 0.1
        assert client.received == b""
    finally:
        client.close()


def raw(port: int, request: bytes) -> bytes:
    """What the server answers to ``request`` (all of it, until it closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer


def test_requests_it_does_not_serve_get_a_clear_status(server):
    assert raw(server.port, b"POST /livez HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert raw(server.port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    huge = b"GET /livez HTTP/1.1\r\nX: " + b"a" * 10_000
    assert raw(server.port, huge).startswith(b"HTTP/1.1 431 ")
    assert get(server.port, "/other")[0] == 404
    head = raw(server.port, b"HEAD /livez HTTP/1.0\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert get(server.port, "/livez?verbose=1")[0] == 200


def test_readiness_names_no_host_or_user_unless_the_operator_asks(settings):
    health = HealthServer([Ticking((False, AWAY))], 0, "127.0.0.1", 30.0).start()
    try:
        status, body = get(health.port, "/readyz")
        assert (status, body) == (503, "relay: not ready: not connected to the database\n")
        settings.DSCHED_HEALTH_DETAIL = True
        assert get(health.port, "/readyz") == (503, f"relay: not ready: {AWAY}\n")
    finally:
        health.stop()


def test_stop_closes_the_port_and_every_connection(server):
    client = Client(server.port)
    wait_for(lambda: server.server.connections == 1, what="the connection served")
    server.stop()
    try:
        wait_for(client.closed_by_server, what="the connection closed")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
    finally:
        client.close()
