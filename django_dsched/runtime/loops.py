"""Pieces shared by the long-running loops (``Scheduler`` and ``Relay``)."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.db.backends.utils import CursorWrapper

from django_dsched.conf import app_settings
from django_dsched.exceptions import DschedError, NotPrimary
from django_dsched.runtime.connections import behind_pooler, describe_failure, server_of
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.one_server import IDENTIFY, ServerPin
from django_dsched.runtime.split_brain import IDENTITY, HostWatch, server_of_row
from django_dsched.runtime.tables import MissingTables, ours_missing, require_tables
from django_dsched.runtime.wakeup import Waker

logger = get_logger("django_dsched")


def default_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Backoff:
    """Exponential backoff with full jitter, for database outages."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.base * 2**self.attempt)
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


def first_line(exc: BaseException) -> str:
    """An exception's first line, for one-line log messages."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# After a lock wait gave up (lock_timeout), the loop goes round again this soon.
LOCK_WAIT_RETRY = 0.1

# The longest a statement of ours waits on a lock held elsewhere (seconds; at most a
# quarter of the lease).
LOCK_WAIT_MAX = 1.0


def hold_bounds(lease_seconds: float | None = None) -> dict[str, str]:
    """The settings that bound, for one transaction of ours, how long a frozen holder holds
    its locks and how long we wait on someone else's (``DSCHED_LEASE_SECONDS`` unless
    given).

    ``idle_in_transaction_session_timeout``: half a lease. A process stopped inside a
    transaction (SIGSTOP, a VM pause, a debugger, Ctrl-Z) leaves its session idle in that
    transaction; the server ends the session half a lease after its last statement, and
    every lock it held with it. Every transaction of ours that takes locks others wait on
    sets it: the loops' (fires, resumes), history upkeep's (making and dropping days,
    retention's deletes), the bucket count's agreement; so a frozen holder stalls the
    others at most half a lease, within the lease, so no lease is lost to it.
    ``lock_timeout``: a quarter of the lease, at most :data:`LOCK_WAIT_MAX` (history upkeep
    sets a shorter one of its own); a statement waiting longer gives up, and its loop goes
    round again with its session (:func:`lock_wait_timed_out`).
    Set per transaction (``set_config(..., true)``), never per session: behind a
    transaction-mode pooler a session setting would stay on the backend for the next client.
    """
    lease = float(app_settings.LEASE_SECONDS if lease_seconds is None else lease_seconds)
    return {
        "idle_in_transaction_session_timeout": str(int(lease * 500)),
        "lock_timeout": str(int(min(LOCK_WAIT_MAX, lease / 4) * 1000)),
    }


# The loops' statements take a batch of rows through indexes; PostgreSQL's JIT compiles
# any statement whose estimated cost passes ``jit_above_cost`` (100,000 by default, ``jit``
# on since PostgreSQL 12), and the estimates grow with the tables while the work does not:
# at 1,000,000 schedules the scheduler's claim was estimated at 500,000, and on a stock
# PostgreSQL 15 compiling its 631 functions took 10 to 15 s against 7 ms to run it
# (bench/NOTES.md, "A million due"); the relay's claim of a large backlog, 1.6 s. Off on a
# loop's direct sessions and its threads' (runtime/one_server.py), and for each transaction
# of a loop behind a pooler too (which hands a session's settings on to other clients).
NO_JIT = {"jit": "off"}


def bound_transaction(cursor: CursorWrapper, settings: dict[str, str] | None = None) -> None:
    """Apply ``settings`` (:func:`hold_bounds` unless given) to the transaction ``cursor``
    is in, for that transaction only, in one statement."""
    settings = hold_bounds() if settings is None else settings
    calls = ", ".join(["set_config(%s, %s, true)"] * len(settings))
    cursor.execute(f"SELECT {calls}", [v for item in settings.items() for v in item])


# While the database stays away, a loop logs one line at the first failed attempt, then
# again when the reason changes or this many seconds after its last line.
OUTAGE_LOG_EVERY = 10.0


def lock_wait_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement giving up a lock wait (``lock_timeout``, SQLSTATE
    55P03): the session and the transaction's rollback are fine, nothing to reconnect."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return getattr(cause, "sqlstate", None) == "55P03"


def ended_idle(exc: BaseException) -> bool:
    """Whether ``exc`` is the database ending this session because it sat in a transaction
    longer than ``idle_in_transaction_session_timeout`` (SQLSTATE 25P03; the process was
    frozen: a SIGSTOP, a VM pause): the bound that frees its locks (:func:`hold_bounds`)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return getattr(cause, "sqlstate", None) == "25P03"


class LoopStats(Protocol):
    db_errors: int


class DatabaseLoop:
    """What ``Scheduler`` and ``Relay`` share: an interruptible loop on one database session.

    Subclasses set ``kind`` (for logs and ``application_name``), ``channels`` (to LISTEN on)
    and ``stats`` (with a ``db_errors`` counter), and implement :meth:`step`, which returns
    how long to sleep. Database errors are logged and retried with backoff; the process does
    not die. ``stop()`` is safe from a signal handler and interrupts the sleep.

    Behind a transaction-mode pooler a session setting (``SET``, ``LISTEN``) stays on a
    backend that other clients get next, so each new session is checked (:func:`behind_pooler`):
    only a direct session gets ``application_name`` and LISTEN (a pooled one polls), and the
    settings the loop needs while it holds locks are set per transaction (:meth:`transaction`).
    """

    kind = "loop"
    channels: tuple[str, ...] = ()
    stats: LoopStats

    def __init__(self, instance_id: str | None, using: str | None) -> None:
        self.instance_id = instance_id or default_instance_id()
        self.using = using or app_settings.DATABASE
        self.stopping = threading.Event()
        self.waker = Waker()
        self._session: object | None = None
        self._backoff = Backoff(cap=float(app_settings.RECONNECT_MAX_SECONDS))
        # The database outage in progress (monotonic start, attempts, last reason), for the
        # logs and /readyz; None while connected. And the server of the last session.
        self.outage_since: float | None = None
        self.outage_attempts = 0
        self.last_error = ""
        self.waiting_for_tables = False  # the last outage is migrate not having run
        self._outage_logged = (0.0, "")
        self.server = ""
        # Set for each new session: whether it goes through a pooler, and whether we LISTEN.
        self.pooled = False
        self.listening = False
        # For the health endpoints (runtime.health), read from another thread: when the
        # loop last went round (monotonic), and whether its last round reached the database.
        self.last_tick = time.monotonic()
        self.connected = False
        # The server of the loop's session, which its threads' sessions must share.
        self.pin = ServerPin(f"{self.kind}={self.instance_id}")
        # With several hosts in the URL: whether two of them accept writes (split brain),
        # watched from a thread; None until the first session, then one per loop.
        self.hosts: HostWatch | None = None
        # The last split this loop stood by for (kept after it closes: ``--once``).
        self.stood_by: str | None = None

    # -- to implement ---------------------------------------------------------------------
    def step(self) -> float:
        raise NotImplementedError

    def shutdown(self) -> None:
        self._close()

    def application_name(self) -> str:
        """The session's ``application_name`` (set on direct sessions only)."""
        return f"dsched-{self.kind}:{self.instance_id}"[:63]

    def transaction_settings(self) -> dict[str, str]:
        """Settings for each transaction :meth:`transaction` opens (``SET LOCAL``)."""
        return {}

    def on_new_session(self) -> None:
        """Called for each new session, ``pooled`` known (for example to forget old locks)."""

    def on_connection_lost(self) -> None:
        """Called when the session is gone (everything it held is gone too)."""

    def readiness(self) -> tuple[bool, str]:
        """Whether this loop can do its work now, and why (the ``/readyz`` answer)."""
        if not self.connected:
            if self.waiting_for_tables:
                return False, self.last_error
            if self.last_error:
                return False, f"not connected to the database: {self.last_error}"
            return False, "not connected to the database"
        split = self.split_brain()
        if split:
            return False, f"two hosts of the database URL accept writes: {split}"
        return True, "connected"

    def watch_interval(self) -> float:
        """Seconds between two looks at the URL's hosts (:meth:`split_brain`)."""
        return float(app_settings.LEASE_SECONDS)

    def split_brain(self) -> str | None:
        """Two different servers of the URL accept writes now (what they are), else None.
        A split seen is remembered in :attr:`stood_by` (``--once`` fails on it)."""
        hosts = self.hosts
        split = None if hosts is None else hosts.split
        if split is not None:
            self.stood_by = split
        return split

    def _watch_hosts(self, connection: Any, where: str) -> None:
        """Look at the URL's hosts when it lists several, now, before the new session
        (``connection``, at ``where``) is used, and from a thread every
        :meth:`watch_interval` after: a session reached while two hosts accept writes is on
        either side, and the loop must stand by from its first statement, not from the
        watch's next round. The session's own server counts as writable whatever a probe
        of the others finds."""
        if self.hosts is None:
            params = connection.get_connection_params()
            self.hosts = HostWatch(
                params, self.watch_interval(), f"{self.kind} instance={self.instance_id}"
            )
        if not self.hosts.needed:
            return
        with connection.cursor() as cursor:
            cursor.execute(IDENTITY)
            own = server_of_row(cursor.fetchone())
        self.hosts.check(None if own is None else (where, own))
        self.hosts.start()

    def tick(self) -> None:
        """The loop is going round (the ``/livez`` answer is the age of the last tick)."""
        self.last_tick = time.monotonic()

    # -- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to stop after the work in hand (safe from a signal handler)."""
        self.stopping.set()
        self.waker.wake()

    def run(self, *, max_iterations: int | None = None) -> None:
        """Loop until :meth:`stop` (or ``max_iterations``), then :meth:`shutdown`."""
        logger.info("%s starting instance=%s", self.kind, self.instance_id)
        iterations = 0
        try:
            while not self.stopping.is_set():
                self.tick()
                wait = self._guarded(self.step)
                iterations += 1
                if max_iterations is not None and iterations >= max_iterations:
                    break
                if wait > 0 and not self.stopping.is_set():
                    self.waker.wait(wait, self._pgconn())
        finally:
            self.shutdown()

    # -- plumbing ---------------------------------------------------------------------------
    def _guarded(self, work: Callable[[], float]) -> float:
        """Run ``work``; on a database error log it, drop the session and back off."""
        try:
            wait = work()
        except OperationalError as exc:
            if not lock_wait_timed_out(exc) or not connections[self.using].is_usable():
                return self._reconnect_after(exc)
            # A lock held elsewhere longer than lock_timeout (transaction_settings): the
            # transaction rolled back; the session, and what this loop holds, are intact.
            self.stats.db_errors += 1
            logger.warning(
                "gave up waiting for a lock (%s); trying again %s=%s",
                first_line(exc),
                self.kind,
                self.instance_id,
            )
            return LOCK_WAIT_RETRY
        except InterfaceError as exc:
            return self._reconnect_after(exc)
        except DatabaseError as exc:
            if ended_idle(exc):
                return self._frozen(exc)
            missing = ours_missing(exc, connections[self.using])
            if missing is not None:  # migrate has not run (yet), or the tables went
                return self._reconnect_after(missing)
            self.stats.db_errors += 1
            self.connected = False
            self._lost_connection()
            delay = self._backoff.next()
            logger.exception(
                "database error; retrying in %.1fs %s=%s", delay, self.kind, self.instance_id
            )
            return delay
        except DschedError:
            raise  # deliberate: a configuration the loop must not run with
        except Exception:
            # Not the database's: code tripping on something (a row's value no check
            # foresaw). The round's transaction rolled back; the loop goes on after a
            # backoff, so one row cannot stop the process and every other row with it.
            delay = self._backoff.next()
            logger.exception(
                "round failed; retrying in %.1fs %s=%s", delay, self.kind, self.instance_id
            )
            return delay
        self._backoff.reset()
        self.connected = True
        if self.waiting_for_tables:
            logger.warning(
                "the tables are there after %.1fs and %d attempt(s): %s=%s on %s",
                time.monotonic() - (self.outage_since or time.monotonic()),
                self.outage_attempts,
                self.kind,
                self.instance_id,
                self.server,
            )
            self._outage_over()
        return wait

    def _frozen(self, exc: BaseException) -> float:
        """The process stood still in a transaction past the bound, and the database ended
        its session (rolling back what it had not committed): the bound at work, said in one
        line (no traceback); the next round starts a session."""
        self.stats.db_errors += 1
        self.connected = False
        self._lost_connection()
        logger.warning(
            "the database ended this session: it stood still in a transaction for longer "
            "than %s ms (frozen? a SIGSTOP, a VM pause, a debugger), so its locks went and "
            "nothing of that transaction was written (%s); reconnecting %s=%s",
            self.transaction_settings().get(
                "idle_in_transaction_session_timeout",
                hold_bounds()["idle_in_transaction_session_timeout"],
            ),
            first_line(exc),
            self.kind,
            self.instance_id,
        )
        return 0.0

    def _reconnect_after(self, exc: BaseException) -> float:
        """The database went away: drop the session and back off."""
        self.stats.db_errors += 1
        self.connected = False
        self._lost_connection()
        delay = self._backoff.next()
        self.note_outage(exc, delay)
        return delay

    def note_outage(self, exc: BaseException, delay: float) -> None:
        """Record a failed attempt to reach (or use) the database, and log it in one line:
        the first of an outage, then when the reason changes or every
        :data:`OUTAGE_LOG_EVERY` seconds."""
        now = time.monotonic()
        why = describe_failure(exc)
        if self.outage_since is not None and isinstance(exc, MissingTables) != (
            self.waiting_for_tables
        ):
            self._outage_over()  # waiting for the tables, or for the server: a new outage
        if self.outage_since is None:
            self.outage_since, self.outage_attempts = now, 0
        self.outage_attempts += 1
        self.last_error = why
        self.waiting_for_tables = isinstance(exc, MissingTables)
        logged_at, logged_why = self._outage_logged
        if self.outage_attempts == 1:
            was = f" (was on {self.server})" if self.server else ""
            logger.warning(
                "%s: %s; retrying in %.1fs %s=%s",
                "not ready" if self.waiting_for_tables else f"database unavailable{was}",
                why,
                delay,
                self.kind,
                self.instance_id,
            )
        elif why != logged_why or now - logged_at >= OUTAGE_LOG_EVERY:
            logger.warning(
                "still %s after %.1fs (%d attempts): %s; retrying in %.1fs %s=%s",
                "not ready" if self.waiting_for_tables else "no database",
                now - self.outage_since,
                self.outage_attempts,
                why,
                delay,
                self.kind,
                self.instance_id,
            )
        else:
            return
        self._outage_logged = (now, why)

    def _connected_to(self, server: str) -> None:
        """A new session reached ``server`` (``host:port``): say so, and that the database is
        back if it follows an outage."""
        if self.waiting_for_tables:  # reaching the server was never the problem: the round
            self.server = server  # that finds the tables says so (_guarded)
            return
        if self.outage_since is not None:
            moved = f" (was on {self.server})" if self.server and self.server != server else ""
            logger.warning(
                "database %s after %.1fs and %d failed attempt(s): %s=%s connected to %s%s",
                "is back" if self.server else "reached",
                time.monotonic() - self.outage_since,
                self.outage_attempts,
                self.kind,
                self.instance_id,
                server,
                moved,
            )
        else:
            logger.info("%s=%s connected to %s", self.kind, self.instance_id, server)
        self._outage_over()
        self.server = server

    def _outage_over(self) -> None:
        self.outage_since, self.outage_attempts, self.last_error = None, 0, ""
        self.waiting_for_tables = False
        self._outage_logged = (0.0, "")

    def _lost_connection(self) -> None:
        self.connected = False
        self.pin.clear()
        self.on_connection_lost()
        self._session = None
        try:
            connections[self.using].close()
        except DatabaseError:
            pass

    @contextmanager
    def transaction(self) -> Iterator[CursorWrapper]:
        """A transaction (``atomic``) with :meth:`transaction_settings` and :data:`NO_JIT`
        applied to it only."""
        connection = connections[self.using]
        settings = {**NO_JIT, **self.transaction_settings()}
        with transaction.atomic(using=self.using), connection.cursor() as cursor:
            bound_transaction(cursor, settings)
            yield cursor

    def _close(self) -> None:
        self.connected = False
        self.pin.clear()
        if self.hosts is not None:
            self.hosts.stop()
            self.hosts = None  # a loop run again watches again
        connections[self.using].close()
        self._session = None

    def _ensure_session(self) -> None:
        """Connect if needed and prepare a new session (pooler check, name, LISTEN)."""
        connection = connections[self.using]
        connection.ensure_connection()
        raw = connection.connection
        if raw is self._session:
            return
        server = server_of(connection)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_is_in_recovery(), ({IDENTIFY})")
            standby, identity = cursor.fetchone()
        if standby:
            raise NotPrimary(
                f"{server} is a standby (in recovery), and the {self.kind} writes: point "
                "DSCHED_DATABASE at the primary (with several hosts, add "
                "target_session_attrs=read-write to the URL)"
            )
        self.pooled = behind_pooler(connection)
        # Before the pin: until the hosts are looked at, the threads' sessions wait.
        self._watch_hosts(connection, server)
        self.pin.set(identity, server, direct=not self.pooled)
        self.listening = self.channels != () and (
            not self.pooled if app_settings.LISTEN is None else bool(app_settings.LISTEN)
        )
        self.on_new_session()
        if connection.connection is not raw:
            # Lost meanwhile (on_new_session's statements): the next step starts again, on a
            # session checked as this one was, not on one a cursor would open unchecked.
            raise InterfaceError(f"the {self.kind}'s new session was lost while it was set up")
        with connection.cursor() as cursor:
            if not self.pooled:
                # A direct session is this loop's alone; behind a pooler the name would stay
                # on the backend for the next client, so the loop goes unnamed there.
                # And no JIT on it (NO_JIT), for every statement, in a transaction or not.
                cursor.execute(
                    "SELECT set_config('application_name', %s, false),"
                    " set_config('jit', 'off', false)",
                    [self.application_name()],
                )
            if self.listening:
                for channel in self.channels:
                    cursor.execute(f"LISTEN {channel}")
        if self.listening:
            raw.add_notify_handler(self.waker.on_notify)
        self._connected_to(server)
        if self.pooled:
            logger.info(
                "%s=%s connects through a pooler: %s",
                self.kind,
                self.instance_id,
                "LISTEN anyway (DSCHED_LISTEN)" if self.listening else "polling instead of LISTEN",
            )
        self._session = raw

    def _pgconn(self) -> Any:
        """The socket to wait on for notifications (None when not listening)."""
        raw = connections[self.using].connection
        return None if raw is None or not self.listening else raw.pgconn


def wait_for_database(loop: DatabaseLoop) -> bool:
    """Connect ``loop``'s database before the loop starts, trying again with its backoff
    (at most ``DSCHED_RECONNECT_MAX_SECONDS`` apart) while it is unreachable or lacks the
    package's tables (``migrate`` has not run yet), one log line
    per reason or per :data:`OUTAGE_LOG_EVERY` seconds, ``/readyz`` answering 503 with the
    reason and ``/livez`` 200 meanwhile. True once connected; False when the loop was
    stopped first (SIGTERM while waiting)."""
    connection = connections[loop.using]
    while not loop.stopping.is_set():
        loop.tick()
        try:
            connection.ensure_connection()
            require_tables(connection)
        except DatabaseError as exc:
            try:
                connection.close()
            except DatabaseError:
                pass
            delay = loop._backoff.next()
            loop.note_outage(exc, delay)
            loop.waker.wait(delay, None)
            continue
        return True  # the loop's first good round resets the backoff
    return False
