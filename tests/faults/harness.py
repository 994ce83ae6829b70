"""The fault matrix's tools: a row the database refuses, a row of edge values written by hand,
a session terminated at a chosen statement, a loop driven a round at a time, and the
elections counted.

Each cell of the matrix (docs/design.md, "Faults: what one row, value, session or outage
can do") is a small test built from these; the frozen peers (a real SIGSTOP) are in
:mod:`tests.faults.peers`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

from tests.helpers import other_session, sql

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
