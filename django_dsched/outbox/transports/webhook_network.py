"""The webhook's network layer (an httpcore network backend): connections go only to checked
addresses, and every socket operation ends by the exchange's deadline.

httpcore's own timeouts apply per operation: a server that sends one byte of its headers
every half second never lets a one-second read timeout expire. Here each operation (name
resolution, connect, TLS handshake, each read and each write) gets at most the time left
until :class:`Deadline`, so a whole exchange ends by it whatever the server does. CPython
applies a socket's timeout to a whole ``connect``, ``do_handshake``, ``recv`` or ``send``
call (not to each packet within it), and the write loop below re-bounds every ``send``.

Names are resolved here, once per connection, and the socket is connected to one of the
addresses just checked (:mod:`.addresses`); the TLS server name and the ``Host`` header stay
the URL's host name.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpcore

from django_dsched.exceptions import AddressRefused
from django_dsched.outbox.transports.addresses import (
    IPNetwork,
    Resolver,
    refusal,
    resolve,
)


class Deadline(threading.local):
    """When the exchange in progress must end (``time.monotonic()``), or None between them.

    One per transport, shared by its connections, which may outlive an exchange in the
    connection pool: each operation reads the deadline of the exchange it serves. A relay
    sends on several threads at once, each its own exchange on its own connection: the
    deadline is the calling thread's.
    """

    def __init__(self) -> None:
        self.at: float | None = None

    def bound(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """``timeout`` cut to the time left; raise ``expired`` when none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise expired("the webhook's TIMEOUT (a deadline for the whole exchange) passed")
        return left if timeout is None else min(timeout, left)


@contextmanager
def _mapped(timeout_error: type[Exception], error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # socket.timeout, ssl's "operation timed out"
        raise timeout_error(str(exc) or "timed out") from exc
    except OSError as exc:  # includes ssl.SSLError
        raise error(str(exc) or type(exc).__name__) from exc


class DeadlineStream(httpcore.NetworkStream):
    """A connected socket (plain or TLS) whose every operation ends by the deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError):
            self._sock.settimeout(self._deadline.bound(timeout, httpcore.ReadTimeout))
            return self._sock.recv(max_bytes)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError):
            while view:
                self._sock.settimeout(self._deadline.bound(timeout, httpcore.WriteTimeout))
                view = view[self._sock.send(view) :]

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            try:
                self._sock.settimeout(self._deadline.bound(timeout, httpcore.ConnectTimeout))
                tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
            except BaseException:
                self._sock.close()
                raise
        return DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._sock if isinstance(self._sock, ssl.SSLSocket) else None
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":  # data or EOF waiting: the pool drops such a connection
            if self._sock.fileno() < 0:
                return True
            poller = select.poll()
            poller.register(self._sock, select.POLLIN)
            return bool(poller.poll(0))
        return None


class CheckedBackend(httpcore.NetworkBackend):
    """Opens TCP connections only to addresses :func:`.addresses.refusal` accepts."""

    def __init__(
        self, deadline: Deadline, allowed_networks: Sequence[IPNetwork], resolver: Resolver
    ) -> None:
        self.deadline = deadline
        self.allowed_networks = tuple(allowed_networks)
        self.resolver = resolver

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            addresses = resolve(
                host,
                port,
                self.resolver,
                self.deadline.bound(timeout, httpcore.ConnectTimeout),
            )
        for address in addresses:
            why = refusal(address, self.allowed_networks)
            if why is not None:
                raise AddressRefused(
                    f"refused to connect to {host} ({why}); DSCHED_WEBHOOK_ALLOWED_NETWORKS "
                    "can open an address range deliberately"
                )
        error: httpcore.ConnectError | None = None
        for address in addresses:
            target = address
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                target = address.ipv4_mapped
            family = socket.AF_INET if target.version == 4 else socket.AF_INET6
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
                    sock.settimeout(self.deadline.bound(timeout, httpcore.ConnectTimeout))
                    sock.connect((str(target), port))
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except httpcore.ConnectError as exc:  # refused, unreachable: try the next one
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return DeadlineStream(sock, self.deadline)
        assert error is not None
        raise error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks do not connect to Unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
