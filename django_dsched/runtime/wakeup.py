"""Interruptible waiting: until a timeout, a stop request, or a NOTIFY on the connection."""

from __future__ import annotations

import os
import selectors
from typing import Any


class Waker:
    """Sleeps on a self-pipe and a database socket; ``wake()`` is safe from signal handlers."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self.notified = False
        # Notifications seen so far (a loop can tell whether one came since it last looked).
        self.notifications = 0

    def wake(self) -> None:
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:  # the pipe is full: a wake-up is already pending
            pass

    def on_notify(self, notify: Any) -> None:
        """psycopg notify handler: notifications that arrive during a query land here."""
        self.notified = True
        self.notifications += 1

    def wait(self, timeout: float, pgconn: Any | None = None) -> None:
        """Return after ``timeout`` seconds, or sooner on ``wake()`` or a notification."""
        if self.notified:
            self.notified = False
            return
        with selectors.DefaultSelector() as selector:
            selector.register(self._read, selectors.EVENT_READ)
            socket = None
            if pgconn is not None:
                try:
                    socket = pgconn.socket
                    selector.register(socket, selectors.EVENT_READ)
                except Exception:  # a broken connection: the next query reports it
                    socket = None
            ready = selector.select(max(0.0, timeout))
        for key, _ in ready:
            if key.fd == self._read:
                self._drain_pipe()
            elif key.fd == socket:
                self._drain_notifies(pgconn)
        self.notified = False

    def _drain_pipe(self) -> None:
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass

    def _drain_notifies(self, pgconn: Any) -> None:
        try:
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                self.notifications += 1
        except Exception:  # a broken connection: the next query reports it
            pass

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
