"""The times a row may hold: those every reader of the row can read and compute with.

PostgreSQL's ``timestamptz`` runs from 4713 BC to the year 294276 and has ``±infinity``;
Python's ``datetime`` (what psycopg reads one into) runs from the year 1 to 9999. A value
outside Python's range makes every Python read of its row fail (an admin page, ``dsched
show``, a relay's claim that already committed), and SQL arithmetic on it can overflow (its
microseconds since 1970 beyond a ``bigint``: year 294270 in the fire path's claim).

So each table's timestamps are held to ``[EARLIEST, LATEST)`` by one CHECK constraint
(:func:`in_range`, ``dsched_<table>_times_in_range``): a day inside Python's ends, so that a
time shown in any zone (offsets within a day) is still a ``datetime``. One CHECK per table,
over all its timestamp columns, because PostgreSQL reads back and compiles every CHECK of a
table on every ``INSERT`` and ``UPDATE`` statement (:mod:`.conditions`): ``LEAST(...) >=
EARLIEST AND GREATEST(...) < LATEST`` is two comparisons however many columns (``LEAST``
and ``GREATEST`` skip NULLs, and a CHECK passes a NULL result, so a nullable column needs no
``IS NULL`` test). ``±infinity`` is outside the range too.

A row can still hold such a value if it was written while the CHECK was dropped or before it
was added ``NOT VALID``; the statements that read a row's times for the cluster (the fire
path's claim, the relay's claim) test the same range in SQL (:func:`readable`) and set such a
row aside, or dead-letter it, with :data:`OUT_OF_RANGE` in its error.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from django.db.models import F, Q, Value
from django.db.models.functions import Greatest, Least
from django.db.models.lookups import GreaterThanOrEqual, LessThan

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, tzinfo=UTC)

# Each table's timestamps, which its CHECK holds to the range.
SCHEDULE_TIMES = (
    "start_ts",
    "end_ts",
    "next_run_ts",
    "next_slot_ts",
    "paused_until",
    "set_aside_ts",
    "last_fired_ts",
    "created_ts",
    "updated_ts",
)
EVENT_TIMES = ("event_ts", "scheduled_ts")
OUTBOX_TIMES = (
    "event_ts",
    "next_attempt_ts",
    "delivered_ts",
    "claimed_until",
    "picked_ts",
    "started_ts",
    "completed_ts",
    "failed_ts",
)

# How an error names the range.
OUT_OF_RANGE = "outside the years 1 to 9999"

_EARLIEST_SQL = f"'{EARLIEST.date().isoformat()} 00:00:00+00'::timestamptz"
_LATEST_SQL = f"'{LATEST.date().isoformat()} 00:00:00+00'::timestamptz"
# The last microsecond within the range.
_LAST_SQL = f"({_LATEST_SQL} - interval '1 microsecond')"


def in_range(*columns: str) -> Q:
    """The condition of a table's CHECK: every one of ``columns`` (at least two) is NULL or
    within ``[EARLIEST, LATEST)``."""
    fields = [F(column) for column in columns]
    return Q(
        GreaterThanOrEqual(Least(*fields), Value(EARLIEST)),
        LessThan(Greatest(*fields), Value(LATEST)),
    )


def readable(column: str) -> str:
    """SQL: whether the ``timestamptz`` ``column`` is within the range (NULL when it is
    NULL); it never fails, whatever the column holds."""
    return f"({column} >= {_EARLIEST_SQL} AND {column} < {_LATEST_SQL})"


def storable(column: str, *, nullable: bool) -> str:
    """SQL: ``column`` as a value the range CHECK accepts: itself when within the range (or
    NULL); else NULL when ``nullable``, or the nearer end of the range. Only for a row taken
    out of service with its error (set aside, dead-lettered): a row that still holds such a
    value, written before the CHECK, could otherwise not be written at all."""
    keep = f"CASE WHEN {column} IS NULL OR {readable(column)} THEN {column}"
    if nullable:
        return f"{keep} END"
    return f"{keep} WHEN {column} < {_EARLIEST_SQL} THEN {_EARLIEST_SQL} ELSE {_LAST_SQL} END"


def held(alias: str, columns: Iterable[str]) -> str:
    """SQL: text naming each of ``columns`` (of the row ``alias``) that is outside the range,
    with what it holds (``end_ts held 294270-01-01 00:00:00+00``), comma-separated; empty
    when none is."""
    parts = ", ".join(
        f"CASE WHEN NOT {readable(f'{alias}.{c}')} THEN '{c} held ' || {alias}.{c}::text END"
        for c in columns
    )
    return f"concat_ws(', ', {parts})"


__all__ = [
    "EARLIEST",
    "EVENT_TIMES",
    "LATEST",
    "OUTBOX_TIMES",
    "OUT_OF_RANGE",
    "SCHEDULE_TIMES",
    "held",
    "in_range",
    "readable",
    "storable",
]
