"""The webhook's keep-alive connections: one httpcore connection per request under way, each
given back when its response is read, and the one given back last taken first.

httpcore's ``ConnectionPool`` serves every request under one lock and, at each request and
each response closed, looks at every connection it holds (whether each has expired, which
polls its socket, and how many are idle, for each of them): with the relay's 64 sends at
once that was over four fifths of its CPU per webhook message. Here a send takes an idle
connection to its origin in O(1) under a lock held for a list's pop, checks that one alone
(its keep-alive expiry, and that the server has not closed it), and gives it back after
its exchange if the exchange left it idle; a connection cut short (a body not read to its
end, an error) is closed. At most ``max_idle`` connections are kept idle; the relay's limits
bound those under way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore

Origin = tuple[str, str, int]  # scheme, host, port


class Connections:
    """Idle keep-alive connections by origin, for a transport's send threads to share."""

    def __init__(
        self, backend: httpcore.NetworkBackend, keepalive_expiry: float, max_idle: int
    ) -> None:
        self.backend = backend
        self.keepalive_expiry = keepalive_expiry
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: dict[Origin, list[httpcore.HTTPConnection]] = {}
        self._count = 0  # idle connections, all origins

    @contextmanager
    def connection(self, origin: Origin) -> Iterator[httpcore.HTTPConnection]:
        """A connection to ``origin`` for one exchange (kept alive after it if it can be)."""
        connection = self._take(origin)
        try:
            yield connection
        except BaseException:
            connection.close()
            raise
        self._give_back(origin, connection)

    def _take(self, origin: Origin) -> httpcore.HTTPConnection:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    break
                connection = idle.pop()
                self._count -= 1
            if not connection.has_expired():
                return connection
            connection.close()  # its keep-alive ran out, or the server closed it
        scheme, host, port = origin
        return httpcore.HTTPConnection(
            origin=httpcore.Origin(scheme.encode("ascii"), host.encode("ascii"), port),
            keepalive_expiry=self.keepalive_expiry,
            network_backend=self.backend,
        )

    def _give_back(self, origin: Origin, connection: httpcore.HTTPConnection) -> None:
        if connection.is_idle() and not connection.is_closed():
            with self._lock:
                if self._count < self.max_idle:
                    self._idle.setdefault(origin, []).append(connection)
                    self._count += 1
                    return
        connection.close()

    def close(self) -> None:
        """Close the idle connections (as httpcore's pool does: a send under way gives its
        own back after it, and a send after this opens a new one)."""
        with self._lock:
            idle = [c for stack in self._idle.values() for c in stack]
            self._idle.clear()
            self._count = 0
        for connection in idle:
            connection.close()
