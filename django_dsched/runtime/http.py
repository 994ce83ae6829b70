"""The small HTTP server of a process's endpoints (``/livez``, ``/readyz``, ``/metrics``): one
thread, non-blocking sockets, bounded in time and number of connections.

Anyone who can reach the port can open connections and leave them idle; a server with a
thread per connection must then either grow without bound or refuse new connections, and a
refused probe restarts the process. :class:`EndpointServer` does neither:

- one thread serves every connection through a selector: a connection costs a socket and a
  few hundred bytes, never a thread;
- a connection has ``timeout`` seconds from its accept to send a complete request (an idle
  or dribbling client is closed then), and as long again to take the answer;
- at most ``max_connections`` are open; a new one past the cap closes an idle connection
  (one that has not sent a complete request): the oldest of the client address that holds
  the most, so the newcomer is served, never refused, and a flood from one address pushes
  out its own connections before a probe from another (the kubelet's, Prometheus's);
- a request is its head alone (at most :data:`MAX_HEAD` bytes), ``GET`` or ``HEAD``; every
  answer closes its connection.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)

# Seconds a connection has to send its request, and again to take its answer (a probe takes
# milliseconds).
READ_TIMEOUT = 2.0
# Connections open at once: each costs a file descriptor, so the cap stays far below the
# process's limit (its database connections need theirs).
MAX_CONNECTIONS = 64
# Connections the kernel holds until they are accepted.
ACCEPT_QUEUE = 1024
# The longest request head read (request line and headers).
MAX_HEAD = 8192

_READ_CHUNK = 4096
_EMPTY_LINE = (b"\r\n\r\n", b"\n\n")
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # without the query
    headers: Mapping[str, str]  # names in lower case


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self, *, head_only: bool = False) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Cache-Control: no-store",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self.headers),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def text(status: int, body: str, *headers: tuple[str, str]) -> Response:
    """A plain-text answer (a newline added)."""
    return Response(status, (body + "\n").encode(), headers=headers)


Route = Callable[[Request], Response]


@dataclass(eq=False, slots=True)
class _Connection:
    sock: socket.socket
    peer: str  # the client's address
    deadline: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: memoryview | None = None  # the answer, once there is one
    closed: bool = False


class _Marker:
    """The selector's data of the listening socket and of the wake-up pipe."""


_LISTENER, _WAKER = _Marker(), _Marker()


def listen(address: str, port: int) -> socket.socket:
    """A non-blocking listening socket on ``address:port`` (IPv4 or IPv6; 0: any free port)."""
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sock = socket.create_server((address, port), family=family[0][0], backlog=ACCEPT_QUEUE)
    sock.setblocking(False)
    return sock


def parse(head: bytes) -> Request | Response:
    """The request a head (request line and headers) asks, or the error answer to it."""
    lines = head.decode("latin-1").splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return text(400, "bad request")
    method, target, _ = parts
    if method not in ("GET", "HEAD"):
        return text(405, "method not allowed: use GET", ("Allow", "GET, HEAD"))
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            return text(400, "bad request")
        headers[name.strip().lower()] = value.strip()
    return Request(method, target.split("?", 1)[0], headers)


class EndpointServer:
    """Serves ``routes`` (path -> answer) on ``address:port`` from one daemon thread until
    :meth:`stop` (module docstring)."""

    def __init__(
        self,
        address: str,
        port: int,
        routes: Mapping[str, Route],
        *,
        name: str,
        timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.routes = dict(routes)
        self.timeout = timeout
        self.max_connections = max(1, max_connections)
        self.listener = listen(address, port)
        self.port: int = self.listener.getsockname()[1]
        # Connections in the order they were accepted (the oldest first).
        self._open: dict[int, _Connection] = {}
        self.dropped = 0  # connections closed to make room for a newer one
        self._stopping = False
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for sock, marker in ((self.listener, _LISTENER), (self._wake_r, _WAKER)):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, marker)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def start(self) -> EndpointServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and the port."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(5)
        else:
            self._close_all()

    # -- the serving thread -------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while not self._stopping:
                try:
                    self._round()
                except Exception:  # never let one bad round end the endpoints
                    logger.exception("the %s server failed a round", self._thread.name)
                    time.sleep(0.1)
        finally:
            self._close_all()

    def _round(self) -> None:
        accept = False
        for key, mask in self._selector.select(self._wait()):
            if key.data is _LISTENER:
                accept = True
            elif key.data is _WAKER:
                self._wake_r.recv(64)
            else:
                connection: _Connection = key.data
                if mask & selectors.EVENT_READ and connection.outbox is None:
                    self._read(connection)
                if mask & selectors.EVENT_WRITE and not connection.closed:
                    self._write(connection)
        # Requests already in are answered before newcomers can push their senders out.
        if accept:
            self._accept()
        self._expire()

    def _wait(self) -> float | None:
        if not self._open:
            return None
        soonest = min(c.deadline for c in self._open.values())
        return max(0.0, soonest - time.monotonic())

    def _accept(self) -> None:
        # At most half the cap a round: a connection accepted in one round has its request
        # read (if it came) in the next before that many newer ones can push it out.
        for _ in range(max(1, self.max_connections // 2)):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    return  # aborted by the client: the next one, next round
                if self._drop_oldest():
                    continue
                time.sleep(0.05)  # the process is out of descriptors: do not spin on it
                return
            sock.setblocking(False)
            if len(self._open) >= self.max_connections:
                self._drop_oldest()
            peer = str(address[0]) if isinstance(address, tuple) else str(address)
            connection = _Connection(sock, peer, time.monotonic() + self.timeout)
            self._open[sock.fileno()] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)
            self._read(connection)  # a request that came with the connection: at once

    def _drop_oldest(self) -> bool:
        """Close the oldest connection still waiting for its request (else the oldest
        answered) of the client address that holds the most of them."""
        pool = [c for c in self._open.values() if c.outbox is None] or list(self._open.values())
        if not pool:
            return False
        held = Counter(c.peer for c in pool)  # in accept order: ties go to the oldest's
        busiest = max(held, key=held.__getitem__)
        self._close(next(c for c in pool if c.peer == busiest))
        self.dropped += 1
        return True

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(connection)
            return
        if not data:
            self._close(connection)  # the client went away before asking
            return
        connection.inbox += data
        ends = [i for i in (connection.inbox.find(e) for e in _EMPTY_LINE) if i >= 0]
        if ends:
            self._answer(connection, self._respond(bytes(connection.inbox[: min(ends)])))
        elif len(connection.inbox) > MAX_HEAD:
            self._answer(connection, (text(431, "request head too large"), False))

    def _respond(self, head: bytes) -> tuple[Response, bool]:
        request = parse(head)
        if isinstance(request, Response):
            return request, False
        route = self.routes.get(request.path)
        if route is None:
            return text(404, "not found: use " + " or ".join(self.routes)), False
        try:
            return route(request), request.method == "HEAD"
        except Exception:
            logger.exception("%s %s failed", request.method, request.path)
            return text(500, "internal error (logged)"), False

    def _answer(self, connection: _Connection, answer: tuple[Response, bool]) -> None:
        response, head_only = answer
        connection.outbox = memoryview(response.encode(head_only=head_only))
        connection.deadline = time.monotonic() + self.timeout
        self._selector.modify(connection.sock, selectors.EVENT_WRITE, connection)
        self._write(connection)

    def _write(self, connection: _Connection) -> None:
        assert connection.outbox is not None
        while connection.outbox:
            try:
                sent = connection.sock.send(connection.outbox)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                break
            connection.outbox = connection.outbox[sent:]
        try:
            connection.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._close(connection)

    def _expire(self) -> None:
        now = time.monotonic()
        for connection in [c for c in self._open.values() if c.deadline <= now]:
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if connection.closed:
            return
        connection.closed = True
        self._open.pop(connection.sock.fileno(), None)
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()

    def _close_all(self) -> None:
        if self._selector.get_map() is None:
            return  # closed already
        for connection in list(self._open.values()):
            self._close(connection)
        for sock in (self.listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._selector.close()
