"""A loop's sessions on one server: its own, and those of its threads.

A loop works on more than one session: the relay claims on threads of its own and renews its
claims on another (:mod:`django_dsched.outbox.claiming`, :mod:`django_dsched.outbox.heartbeat`),
and the scheduler keeps its history on a third (:mod:`django_dsched.scheduler.retention_worker`).
Each connects when it needs to. With a multi-host URL a new session goes to the first host that
accepts writes, so when an old primary comes back writable beside the promoted one (a split
brain the failover manager did not fence), a thread's new session can land there while the
loop's own session stays on the promoted server. A claim made there takes messages the other
side delivered already, and sends them again; their outcomes are then settled on the other
server, which knows nothing of that claim, so they are taken and sent a third time.

So a thread's session must be on the loop's server. :class:`ServerPin` holds the loop's server
(its system identifier and postmaster start: a restarted or promoted server is another), set
when the loop's own session starts and cleared when it is lost. A thread calls :meth:`check`
before its statements: the first time on each session, and again after the loop's session
changed, it asks its server who it is (one round trip); on another server, or while the loop
has none, its session is closed and :class:`OtherServer` raised, a database error the thread
handles as it would a lost connection. Its next session tries again. A direct session (not
through a pooler) also gets the loop's session settings there: no JIT (runtime.loops.NO_JIT).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from django.db import OperationalError

from django_dsched.exceptions import DschedError

# Which server a session is on: a promoted standby shares its primary's system identifier,
# not its postmaster's start.
IDENTIFY = (
    "SELECT (SELECT system_identifier FROM pg_control_system())::text || ' started '"
    " || pg_postmaster_start_time()::text"
)


class OtherServer(DschedError, OperationalError):
    """A thread's session is not on its loop's server (or the loop has none now)."""


def identify(connection: Any, *, no_jit: bool = False) -> str:
    """The server a Django connection (connected) is on; ``no_jit``: and turn JIT off for
    the session (a direct one: runtime.loops.NO_JIT)."""
    with connection.cursor() as cursor:
        if no_jit:
            cursor.execute(f"SELECT ({IDENTIFY}), set_config('jit', 'off', false)")
        else:
            cursor.execute(IDENTIFY)
        server = cursor.fetchone()[0]
    return str(server)


class ServerPin:
    """The server of a loop's own session, which its threads' sessions must share."""

    def __init__(self, name: str) -> None:
        self.name = name  # "relay=r1": for the error
        self._lock = threading.Lock()
        self._server: str | None = None
        self._where = ""  # host:port of the loop's session, for the error
        self._direct = False  # whether the loop's session is direct (not through a pooler)
        self._generation = 0
        # The sessions found on the pinned server, and the generation they were checked at.
        self._checked: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    @property
    def server(self) -> str | None:
        return self._server

    @property
    def generation(self) -> int:
        """Moves on each time the loop's session is lost or reaches another server."""
        return self._generation

    def set(self, server: str, where: str, *, direct: bool = False) -> None:
        """The loop's own session is on ``server`` (at ``where``, host:port; ``direct``: not
        through a pooler, so its threads' sessions get its settings too)."""
        with self._lock:
            if server != self._server:
                self._generation += 1
            self._server, self._where, self._direct = server, where, direct

    def clear(self) -> None:
        """The loop's own session is gone."""
        with self._lock:
            self._server = None
            self._generation += 1

    def check(self, connection: Any) -> None:
        """Raise :class:`OtherServer` (its session closed) unless ``connection``, a thread's
        Django connection, is on the loop's server. Connects if needed."""
        connection.ensure_connection()
        raw = connection.connection
        with self._lock:
            server, where, generation = self._server, self._where, self._generation
            direct = self._direct
            if server is not None and self._checked.get(raw) == generation:
                return
        found = None if server is None else identify(connection, no_jit=direct)
        if found != server or server is None:
            at = f"{raw.info.host}:{raw.info.port}"
            connection.close()
            if server is None:
                raise OtherServer(f"{self.name} has no session of its own now (this one: {at})")
            raise OtherServer(
                f"this session reached another server than {self.name}'s: {at} ({found}), "
                f"not {where} ({server}); two hosts of the URL accept writes?"
            )
        with self._lock:
            if self._generation == generation:
                self._checked[raw] = generation
