"""Test helpers: bounded waits on real state, extra database sessions, SQL shortcuts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import connection, connections

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def other_session(alias: str = "default") -> Iterator[Any]:
    """A second, independent database session (its own backend), closed on exit."""
    wrapper = connections.create_connection(alias)
    try:
        wrapper.ensure_connection()
        yield wrapper
    finally:
        wrapper.close()


def sql(query: str, params: Any = None, using: Any = None) -> list[tuple[Any, ...]]:
    with (using or connection).cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def lock_waiter(query_like: str, *, what: str, using: Any = None) -> int:
    """Wait until a session running a query that matches ``query_like`` (a LIKE pattern)
    waits for a lock; its backend's pid."""
    rows = wait_for(
        lambda: sql(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            [query_like],
            using=using,
        ),
        what=what,
    )
    return int(rows[0][0])


def backend_pid(wrapper: Any) -> int:
    return sql("SELECT pg_backend_pid()", using=wrapper)[0][0]


def backend_gone(pid: int) -> bool:
    return not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])


def second_event(event: Any) -> Any:
    """Another event for the slot of ``event`` (an ``Event``), written by hand with an id the
    CHECK dsched_event_slot_in_id lets into the slot's day: only the day's exactly-once index
    can refuse it."""
    from django_dsched.history.event_ids import change_id
    from django_dsched.models import Event

    return Event.objects.create(
        id=change_id(event.scheduled_ts),
        host_id=event.host_id,
        aggregate_id=event.aggregate_id,
        aggregate_version=event.aggregate_version + 1,
        event_type=event.event_type,
        event_ts=event.event_ts,
        payload={},
        scheduled_ts=event.scheduled_ts,
    )
