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
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db import DataError, IntegrityError, connections, transaction

from tests.helpers import other_session, sql, wait_for

ROOT = Path(__file__).resolve().parents[2]

# What the refusing trigger says (a P0001: the class runtime/refusals.py reads as a row's).
REFUSED = "refused by the fault matrix"

REFUSALS = ("check", "trigger")


@contextmanager
def refusing(table: str, condition: str, how: str, name: str = "dsched_fault") -> Iterator[None]:
    """``table`` refuses every write that leaves a row meeting ``condition`` (an SQL
    condition on the row's columns, written with ``{r}.`` before each column), as a rule
    added by hand would: ``how`` is ``"check"`` (a CHECK ... NOT VALID: rows already there
    need not meet it until they are written) or ``"trigger"`` (a BEFORE row trigger that
    RAISEs, on inserts, updates and, for the row as it was, deletes). ``name`` names the
    rule (several at once need several names)."""
    if how == "check":
        sql(
            f"ALTER TABLE {table} ADD CONSTRAINT {name}"
            f" CHECK (NOT ({condition.replace('{r}.', '')})) NOT VALID"
        )
        try:
            yield
        finally:
            sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}")
        return
    assert how == "trigger", how
    sql(
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF TG_OP = 'DELETE' THEN IF {condition.format(r='OLD')} THEN"
        f"   RAISE EXCEPTION '{REFUSED}'; END IF; RETURN OLD; END IF;"
        f" IF {condition.format(r='NEW')} THEN RAISE EXCEPTION '{REFUSED}'; END IF;"
        " RETURN NEW; END $$"
    )
    sql(
        f"CREATE TRIGGER {name} BEFORE INSERT OR UPDATE OR DELETE ON {table}"
        f" FOR EACH ROW EXECUTE FUNCTION {name}()"
    )
    try:
        yield
    finally:
        sql(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        sql(f"DROP FUNCTION IF EXISTS {name}()")


@contextmanager
def refusing_all(rules: list[tuple[str, str, str]]) -> Iterator[None]:
    """Several rules at once: (table, condition, how) each (see :func:`refusing`)."""
    with ExitStack() as stack:
        for n, (table, condition, how) in enumerate(rules):
            stack.enter_context(refusing(table, condition, how, name=f"dsched_fault_{n}"))
        yield


def write_by_hand(table: str, key: str, value: Any, **columns: str) -> bool:
    """Set ``columns`` (SQL expressions: ``"'infinity'"``, ``"9223372036854775807"``) on the
    row of ``table`` whose ``key`` is ``value``, past every door's validation. False when the
    database itself refuses the values (a CHECK on the range of a column, a column's
    type): then no such row can exist, and the cell holds at the door."""
    sets = ", ".join(f"{name} = {expression}" for name, expression in columns.items())
    try:
        with transaction.atomic():
            sql(f"UPDATE {table} SET {sets} WHERE {key} = %s", [value])
    except (IntegrityError, DataError):
        return False
    return True


def deep_json(depth: int) -> str:
    """A JSON object holding arrays nested ``depth`` deep (past every door's depth limit)."""
    return '{"x": ' + "[" * depth + "]" * depth + "}"


@contextmanager
def terminated_at(*patterns: str, using: str = "default") -> Iterator[list[str]]:
    """The database goes away for this thread's session on ``using`` at the first statement
    matching each of ``patterns`` (regular expressions; each once, in whatever order they
    come): the session's backend is terminated from another session
    (``pg_terminate_backend``) just before the statement is sent, so it fails as on a server
    restart or a network cut, mid-transaction if one is open. Yields the patterns met."""
    connection = connections[using]
    met: list[str] = []
    wanted = [(p, re.compile(p, re.IGNORECASE | re.DOTALL)) for p in patterns]

    def cut(execute: Callable[..., Any], query: str, params: Any, many: bool, context: Any) -> Any:
        for pattern, regex in wanted:
            if pattern not in met and regex.search(query):
                met.append(pattern)
                pid = connection.connection.info.backend_pid
                with other_session(using) as killer:
                    sql("SELECT pg_terminate_backend(%s, 5000)", [pid], using=killer)
                break
        return execute(query, params, many, context)

    with connection.execute_wrapper(cut):
        yield met


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


BIGINT_MAX = 9223372036854775807
INTEGER_MAX = 2147483647
SMALLINT_MAX = 32767
# The last second PostgreSQL's timestamptz holds (past Python's datetime, year 9999).
LAST_TIMESTAMP = "'294276-12-31 23:59:59+00'"

# What a cell needs that the other engineer's branch (faults-named) brings: strict, so the
# lead sees them pass on merge and removes the mark.
NEEDS_FAULTS_NAMED = "needs faults-named"


def every_second(start: datetime, count: int, **fields: Any) -> list[Any]:
    """``count`` healthy schedules firing every second from ``start``."""
    from django_dsched.enums import FrequencyUnit
    from tests.factories import ScheduleFactory

    return list(
        ScheduleFactory.create_batch(
            count, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=start, **fields
        )
    )


def leader(name: str = "survivor", **options: Any) -> Any:
    """An in-process Scheduler without its history thread (the cells drive upkeep
    themselves)."""
    from django_dsched.scheduler import Scheduler

    scheduler = Scheduler(instance_id=name, **options)
    scheduler._retention_wanted = False
    return scheduler


def shown(name: str) -> str:
    """What ``dsched show NAME`` prints."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("dsched", "show", name, stdout=out)
    return out.getvalue()
