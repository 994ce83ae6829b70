"""The fault matrix's tools: a row the database refuses, a row of edge values written by hand,
a session terminated at a chosen statement, a loop driven a round at a time, and the
elections counted.

Each cell of the matrix (docs/design.md, "Faults: what one row, value, session or outage
can do") is a small test built from these; the frozen peers (a real SIGSTOP) are in
:mod:`tests.faults.peers`.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db import connections

from tests.helpers import other_session, sql, wait_for

ROOT = Path(__file__).resolve().parents[2]

# What the refusing trigger says (a P0001: the class runtime/refusals.py reads as a row's).
REFUSED = "refused by the fault matrix"

REFUSALS = ("check", "trigger")


@contextmanager
def refusing(table: str, condition: str, how: str) -> Iterator[None]:
    """``table`` refuses every write that leaves a row meeting ``condition`` (an SQL
    condition on the row's columns, written with ``{r}.`` before each column), as a rule
    added by hand would: ``how`` is ``"check"`` (a CHECK ... NOT VALID: rows already there
    need not meet it until they are written) or ``"trigger"`` (a BEFORE row trigger that
    RAISEs, on inserts, updates and, for the row as it was, deletes)."""
    if how == "check":
        sql(
            f"ALTER TABLE {table} ADD CONSTRAINT dsched_fault"
            f" CHECK (NOT ({condition.format(r=table)})) NOT VALID"
        )
        try:
            yield
        finally:
            sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS dsched_fault")
        return
    assert how == "trigger", how
    sql(
        "CREATE FUNCTION dsched_fault_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF TG_OP = 'DELETE' THEN IF {condition.format(r='OLD')} THEN"
        f"   RAISE EXCEPTION '{REFUSED}'; END IF; RETURN OLD; END IF;"
        f" IF {condition.format(r='NEW')} THEN RAISE EXCEPTION '{REFUSED}'; END IF;"
        " RETURN NEW; END $$"
    )
    sql(
        f"CREATE TRIGGER dsched_fault_refuse BEFORE INSERT OR UPDATE OR DELETE ON {table}"
        " FOR EACH ROW EXECUTE FUNCTION dsched_fault_refuse()"
    )
    try:
        yield
    finally:
        sql(f"DROP TRIGGER IF EXISTS dsched_fault_refuse ON {table}")
        sql("DROP FUNCTION IF EXISTS dsched_fault_refuse()")


def write_by_hand(table: str, key: str, value: Any, **columns: str) -> None:
    """Set ``columns`` (SQL expressions: ``"'infinity'"``, ``"9223372036854775807"``) on the
    row of ``table`` whose ``key`` is ``value``, past every door's validation."""
    sets = ", ".join(f"{name} = {expression}" for name, expression in columns.items())
    sql(f"UPDATE {table} SET {sets} WHERE {key} = %s", [value])


def deep_json(depth: int) -> str:
    """A JSON text nested ``depth`` arrays deep (past every door's depth limit)."""
    return "[" * depth + "]" * depth


@contextmanager
def terminated_at(pattern: str, using: str = "default", times: int = 1) -> Iterator[list[str]]:
    """The database goes away for this thread's session on ``using`` at the first ``times``
    statements matching ``pattern`` (a regular expression): the session's backend is
    terminated from another session (``pg_terminate_backend``) just before the statement is
    sent, so it fails as it would on a server restart or a network cut, mid-transaction if
    one is open. Yields the statements it was aimed at."""
    connection = connections[using]
    aimed: list[str] = []
    wanted = re.compile(pattern, re.IGNORECASE | re.DOTALL)

    def cut(execute: Callable[..., Any], query: str, params: Any, many: bool, context: Any) -> Any:
        if len(aimed) < times and wanted.search(query):
            aimed.append(query)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                (pid,) = cursor.fetchone()
            with other_session(using) as killer:
                sql("SELECT pg_terminate_backend(%s, 5000)", [pid], using=killer)
        return execute(query, params, many, context)

    with connection.execute_wrapper(cut):
        yield aimed


def elections() -> int:
    """Leases taken so far: the sum of every lease row's epoch (each take adds one)."""
    return int(sql("SELECT coalesce(sum(epoch), 0) FROM scheduler_lock_t")[0][0])


def drive_all(loops: list[Any], seconds: float, *, until: Callable[[], Any] | None = None) -> Any:
    """Run ``loops`` (Schedulers, Relays) in turn, a round each, on this thread, for at most
    ``seconds`` or until ``until()`` is truthy (checked after every round); its last value.
    A round that waits on a lock holds the others up too, and so is measured with them."""
    deadline = time.monotonic() + seconds
    done = None
    while time.monotonic() < deadline:
        waits = [loop._guarded(loop.step) for loop in loops]
        if until is not None and (done := until()):
            return done
        time.sleep(min(max(min(waits), 0.0), 0.05))
    return done


def fire_times(schedules: list[Any], since: datetime) -> dict[Any, list[datetime]]:
    """Each schedule's fires (their events' times) since ``since``, oldest first."""
    found: dict[Any, list[datetime]] = {s.pk: [] for s in schedules}
    rows = sql(
        "SELECT aggregate_id, event_ts FROM event_store_t WHERE scheduled_ts IS NOT NULL"
        " AND aggregate_id = ANY(%s) AND event_ts >= %s ORDER BY event_ts",
        [[s.pk for s in schedules], since],
    )
    for schedule_id, at in rows:
        found[schedule_id].append(at)
    return found


def longest_gaps(schedules: list[Any], since: datetime, until: datetime) -> dict[Any, float]:
    """Each schedule's longest time without a fire between ``since`` and ``until`` (s)."""
    return {
        schedule_id: max(
            (b - a).total_seconds() for a, b in itertools.pairwise([since, *times, until])
        )
        for schedule_id, times in fire_times(schedules, since).items()
    }


def drive(loop: Any, seconds: float, *, until: Callable[[], Any] | None = None) -> Any:
    """Run ``loop`` (a Scheduler or a Relay) a round at a time on this thread for at most
    ``seconds`` (each round's sleep cut to 0.05 s), or until ``until()`` is truthy; its
    last value."""
    deadline = time.monotonic() + seconds
    done = None
    while time.monotonic() < deadline:
        wait = loop._guarded(loop.step)
        if until is not None and (done := until()):
            return done
        time.sleep(min(max(wait, 0.0), 0.05))
    return done


def database_url() -> str:
    """The main DATABASE_URL, pointed at the test database (for a peer process)."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connections["default"].settings_dict["NAME"]))


class FrozenPeer:
    """A peer process (:mod:`tests.faults.peer`) that stops itself with SIGSTOP right after
    the first statement matching ``stop_after``: ``kind`` is ``"command"`` (a management
    command and its arguments) or ``"call"`` (a function's dotted path). A watchdog sends
    SIGCONT after ``watchdog`` seconds, so a test of a bound that does not hold fails
    instead of hanging."""

    def __init__(
        self,
        log: Path,
        stop_after: str,
        kind: str,
        target: str,
        *args: str,
        env: dict[str, str] | None = None,
        watchdog: float = 30,
    ) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.peer", stop_after, kind, target, *args],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        self.watchdog = threading.Timer(watchdog, self.thaw)
        self.watchdog.daemon = True
        self.watchdog.start()

    def output(self) -> str:
        return self.log.read_text()

    def stopped(self) -> bool:
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def wait_frozen(self, timeout: float = 30) -> int:
        """Wait until the peer stopped itself; its session's backend pid."""
        found = wait_for(
            lambda: self.stopped() and re.search(r"^frozen (\d+)$", self.output(), re.M),
            timeout=timeout,
            what=f"the peer to stop itself: {self.output()}",
        )
        return int(found.group(1))

    def thaw(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def finish(self, timeout: float = 30) -> int:
        """Let it go on and end; its exit status."""
        self.watchdog.cancel()
        self.thaw()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)


@contextmanager
def frozen_peer(
    log: Path, stop_after: str, kind: str, target: str, *args: str, **options: Any
) -> Iterator[FrozenPeer]:
    """A :class:`FrozenPeer`, let go (SIGCONT) and waited for on the way out."""
    peer = FrozenPeer(log, stop_after, kind, target, *args, **options)
    try:
        yield peer
    finally:
        peer.finish()
