"""A TCP proxy on a localhost port in front of a database server (TCP or Unix socket).

Tests start and stop it to make "the database" go away and come back for the processes
connected through it: ``stop()`` closes the listener and every connection (the clients see
the connection drop, as when a server dies), ``start()`` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from tests.brokers import free_port


class TcpProxy:
    def __init__(self, target: str | tuple[str, int], port: int | None = None) -> None:
        self.target = target  # a Unix socket path, or (host, port)
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            return upstream
        return socket.create_connection(self.target)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for pump, a, b in ((self._pump, client, upstream), (self._answer, upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def _answer(self, source: socket.socket, sink: socket.socket) -> None:
        """The server's bytes to the client (a subclass may hold some back)."""
        self._pump(source, sink)

    @staticmethod
    def _pump(
        source: socket.socket,
        sink: socket.socket,
        passed: Callable[[bytes], tuple[bytes, bool]] | None = None,
    ) -> None:
        """Pass ``source``'s bytes to ``sink`` until either closes, then close both;
        ``passed``: what of each chunk to pass on, and whether to go on after it."""
        try:
            while data := source.recv(65536):
                more = True
                if passed is not None:
                    data, more = passed(data)
                sink.sendall(data)
                if not more:
                    break
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
