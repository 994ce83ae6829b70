"""What bounds bench/create_bench.py on this machine: the creates' own SQL with no Python.

    .venv/bin/python bench/create_ceiling.py --runs 5

Prints, per run and as medians:

- ``bulk statement alone``: the exact ``INSERT`` that ``api.bulk_create`` sends (schedules
  and their "created" events; captured from the code), 100,000 rows in statements of
  ``bulk_insert.CHUNK`` rows with parameters built beforehand (fresh ids), one after the
  other in one transaction, bound as the code binds them (on the server, arrays in binary):
  no validation and no model instances. ``bulk_create`` overlaps its Python with the
  server's work (pipelined), so it can come near this, not beat it.
- ``bulk statement alone, text binding``: the same with its arrays as text literals
  (Django's default client-side binding, as before ``binding.py``).
- ``COPY of the same rows``: the 100,000 schedule rows and 100,000 event rows (payloads
  built beforehand) written by ``COPY ... FROM STDIN``, one transaction: the floor for
  writing these rows and their index entries on this server.
- ``one-row insert, autocommit``: ``INSERT INTO`` a one-column table, each its own commit:
  the rate at which this disk flushes the WAL for a commit (``synchronous_commit`` on).
- ``single statement alone``: the exact statement of ``api.create_once(delay=...)``, in one
  transaction and in autocommit, parameters built beforehand; then the same prepared
  (``DSCHED_PREPARE_CREATES``'s cursor on Django's connection, without Django's wrapper).
- ``two-row floor``: the least a create can send: one schedule row (its required columns)
  and one audit event with an empty payload, prepared through psycopg alone (the floor of
  a single create on this machine, whatever the package does), and unprepared through
  Django's cursor (the floor of a create that prepares nothing).

Runs against the ``dsched_create_bench`` database, as create_bench.py does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import create_bench as bench
from django.core.management import call_command
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from django_dsched import api
from django_dsched.changes import audit, bulk_insert, creates, single_insert
from django_dsched.models import Event, Schedule
from django_dsched.runtime import binding

# The least a single create can send: the schedule's required columns, an empty audit event.
FLOOR = """WITH c AS (
    INSERT INTO schedule_t (schedule_id, host_id, schedule_name, schedule_kind, start_ts,
        next_run_ts, next_slot_ts, event_topic, event_type, event_data, origin)
    VALUES (%(schedule_id)s, %(host_id)s, %(schedule_name)s, 'ONCE',
        statement_timestamp() + %(delay_)s, statement_timestamp() + %(delay_)s,
        statement_timestamp() + %(delay_)s, %(event_topic)s, %(event_type)s, %(event_data)s,
        'API')
    RETURNING schedule_id, host_id, start_ts, created_ts
), a AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
        event_type, event_ts, payload, metadata)
    SELECT %(event_id_)s, c.host_id, c.schedule_id, 'Schedule', 1, 'dsched.schedule.created',
        c.created_ts, '{}', '{}'
    FROM c
)
SELECT c.start_ts, c.created_ts FROM c"""

ROWS = bulk_insert.CHUNK
STATEMENTS = 100_000 // ROWS


def capture(action: Callable[[], object]) -> tuple[str, dict[str, Any]]:
    """The first statement ``action`` would send, and its parameters (not sent)."""
    captured: dict[str, Any] = {}
    real = CursorWrapper.execute

    def fake(self: CursorWrapper, sql: str, params: Any = None) -> None:
        captured.update(sql=sql, params=params)
        raise RuntimeError("captured")

    CursorWrapper.execute = fake  # type: ignore[method-assign]
    try:
        action()
    except RuntimeError:
        pass
    finally:
        CursorWrapper.execute = real  # type: ignore[method-assign]
    return captured["sql"], captured["params"]


def capture_bulk() -> tuple[str, dict[str, Any]]:
    """The statement ``bulk_create`` sends for :data:`ROWS` one-shots, and its parameters."""
    preparer = creates.Preparer()
    return capture(
        lambda: bulk_insert.insert_many(
            [preparer.prepare(spec) for spec in bench.specs(0, ROWS)],  # type: ignore[arg-type]
            actor=None,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    call_command("migrate", verbosity=0)
    bench.reset()
    bulk_sql, bulk_params = capture_bulk()
    one_sql, one_params = capture(
        lambda: api.create_once(delay=timedelta(hours=1), data={"user": 1}, **bench.COMMON)
    )
    # The array parameters holding ids (schedule ids, event ids) and names (= the ids).
    id_arrays = [
        name
        for name, value in bulk_params.items()
        if isinstance(value, list) and value and isinstance(value[0], uuid.UUID)
    ]
    name_arrays = [
        name
        for name, value in bulk_params.items()
        if isinstance(value, list) and value and isinstance(value[0], str) and len(value[0]) == 36
    ]

    def fresh_bulk() -> dict[str, Any]:
        params = dict(bulk_params)
        for name in id_arrays:
            params[name] = [uuid.uuid4() for _n in range(ROWS)]
        for name in name_arrays:
            params[name] = [str(value) for value in params[id_arrays[0]]]
        return params

    def fresh_one() -> dict[str, Any]:
        schedule_id = uuid.uuid4()
        return {
            **one_params,
            "schedule_id": schedule_id,
            "event_id_": uuid.uuid4(),
            "schedule_name": str(schedule_id),
        }

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS create_ceiling_t (id bigint)")
    text_sql = re.sub(r"%\((a\d+)\)b", r"%(\1)s", bulk_sql)
    copy_rows = copy_rows_from(bulk_params)
    figures: dict[str, list[float]] = {
        "bulk statement alone (100,000 rows)": [],
        "bulk statement alone, text binding": [],
        "COPY of the same rows (schedules and events)": [],
        "one-row insert, autocommit": [],
        "single statement alone, one transaction": [],
        "single statement alone, autocommit": [],
        "single statement alone, prepared, one transaction": [],
        "single statement alone, prepared, autocommit": [],
        "two-row floor, prepared, one transaction": [],
        "two-row floor, prepared, autocommit": [],
        "two-row floor, unprepared, one transaction": [],
        "two-row floor, unprepared, autocommit": [],
    }
    floor_keys = ("schedule_id", "host_id", "schedule_name", "delay_", "event_topic")
    floor_keys += ("event_type", "event_data", "event_id_")

    def raw_rate(
        sql: str, count: int, *, atomic: bool, only: tuple[str, ...] = (), prepared: bool = True
    ) -> float:
        """``count`` executions of ``sql``, prepared through a psycopg cursor (no Django), or
        unprepared through Django's cursor."""
        batch = [fresh_one() for _n in range(count)]
        if only:
            batch = [{name: params[name] for name in only} for params in batch]
        connection.ensure_connection()
        raw = connection.connection
        started = time.perf_counter()
        with transaction.atomic() if atomic else nullcontext():
            for params in batch:
                with (
                    single_insert._PreparingCursor(raw) if prepared else connection.cursor()
                ) as cursor:
                    cursor.execute(sql, params)
                    cursor.fetchall()
        return count / (time.perf_counter() - started)

    for _run in range(runs):
        bench.reset()
        batches = [fresh_bulk() for _n in range(STATEMENTS)]
        started = time.perf_counter()
        with transaction.atomic(), binding.cursor(connection) as cursor:
            for params in batches:
                cursor.execute(bulk_sql, params)
                cursor.fetchall()
        figures["bulk statement alone (100,000 rows)"].append(
            ROWS * STATEMENTS / (time.perf_counter() - started)
        )
        bench.reset()
        batches = [fresh_bulk() for _n in range(STATEMENTS)]
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            for params in batches:
                cursor.execute(text_sql, params)
                cursor.fetchall()
        figures["bulk statement alone, text binding"].append(
            ROWS * STATEMENTS / (time.perf_counter() - started)
        )
        bench.reset()
        schedules, events = copy_rows(ROWS * STATEMENTS)
        schedule_text, event_text = _copy_text(schedules), _copy_text(events)
        started = time.perf_counter()
        copy_in(schedule_text, event_text)
        figures["COPY of the same rows (schedules and events)"].append(
            ROWS * STATEMENTS / (time.perf_counter() - started)
        )
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for n in range(500):
                cursor.execute("INSERT INTO create_ceiling_t VALUES (%s)", [n])
        figures["one-row insert, autocommit"].append(500 / (time.perf_counter() - started))
        singles = [fresh_one() for _n in range(2000)]
        started = time.perf_counter()
        with transaction.atomic():
            for params in singles:
                with connection.cursor() as cursor:
                    cursor.execute(one_sql, params)
                    cursor.fetchall()
        figures["single statement alone, one transaction"].append(
            2000 / (time.perf_counter() - started)
        )
        singles = [fresh_one() for _n in range(1000)]
        started = time.perf_counter()
        for params in singles:
            with connection.cursor() as cursor:
                cursor.execute(one_sql, params)
                cursor.fetchall()
        figures["single statement alone, autocommit"].append(1000 / (time.perf_counter() - started))
        one_plain = "single statement alone, prepared, "
        figures[one_plain + "one transaction"].append(raw_rate(one_sql, 2000, atomic=True))
        figures[one_plain + "autocommit"].append(raw_rate(one_sql, 1000, atomic=False))
        figures["two-row floor, prepared, one transaction"].append(
            raw_rate(FLOOR, 2000, atomic=True, only=floor_keys)
        )
        figures["two-row floor, prepared, autocommit"].append(
            raw_rate(FLOOR, 1000, atomic=False, only=floor_keys)
        )
        figures["two-row floor, unprepared, one transaction"].append(
            raw_rate(FLOOR, 2000, atomic=True, only=floor_keys, prepared=False)
        )
        figures["two-row floor, unprepared, autocommit"].append(
            raw_rate(FLOOR, 1000, atomic=False, only=floor_keys, prepared=False)
        )
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE create_ceiling_t")
    bench.reset()
    for label, rates in figures.items():
        bench.report(label, rates)


Rows = list[tuple[Any, ...]]


def copy_rows_from(params: dict[str, Any]) -> Callable[[int], tuple[Rows, Rows]]:
    """A maker of ``count`` schedule rows and their events for COPY: the values of the
    captured bulk statement (its shared parameters and first row), fresh ids, the times
    the statement would compute, the created event's payload built in Python."""
    columns = [f for f in Schedule._meta.concrete_fields if not getattr(f, "generated", False)]
    by_name = {str(field.column): field for field in columns}
    arrays = [name for name in params if re.fullmatch(r"a\d+", name)]
    first: dict[str, Any] = {name: value for name, value in params.items() if name in by_name}
    # The arrays' columns, in the statement's order (the columns not shared).
    shared_or_extra = {*first, "delay_"}
    unshared = [
        str(f.column)
        for f in columns
        if str(f.column) in by_name
        and str(f.column) not in shared_or_extra
        and str(f.column) not in ("created_ts", "updated_ts")
    ]
    for name, column in zip(arrays, unshared, strict=False):
        first[column] = params[name][0]

    def make(count: int) -> tuple[Rows, Rows]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            ((now,),) = cursor.fetchall()
        at = now + timedelta(hours=1)
        schedules, events = [], []
        for n in range(count):
            row = dict(first)
            schedule_id = uuid.uuid4()
            row.update(
                schedule_id=schedule_id,
                schedule_name=str(schedule_id),
                event_data=json.dumps({"user": n}),
                start_ts=at,
                next_run_ts=at,
                next_slot_ts=at,
                created_ts=now,
                updated_ts=now,
            )
            schedules.append(tuple(row.get(str(f.column)) for f in columns))
            definition = {name: audit.plain(row.get(name)) for name in audit.DEFINITION_FIELDS}
            definition["event_data"] = {"user": n}
            payload = {"actor": "system", "at": now.isoformat(), "definition": definition}
            metadata = {"actor": "system", "schedule_name": str(schedule_id), "origin": "API"}
            events.append(
                (
                    uuid.uuid4(),
                    row["host_id"],
                    schedule_id,
                    "Schedule",
                    1,
                    "dsched.schedule.created",
                    now,
                    json.dumps(payload),
                    json.dumps(metadata),
                )
            )
        return schedules, events

    return make


def _copy_text(rows: Rows) -> bytes:
    """``rows`` in COPY's text format (formatted before the clock starts)."""

    def field(value: Any) -> str:
        if value is None:
            return "\\N"
        if isinstance(value, bool):
            return "t" if value else "f"
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
        for char, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
            text = text.replace(char, escaped)
        return text

    return "".join("\t".join(map(field, row)) + "\n" for row in rows).encode()


def copy_in(schedules: bytes, events: bytes) -> None:
    """COPY the rows (already in COPY's text format) into schedule_t and event_store_t, in
    one transaction: the server's work alone (parsing the rows, writing them and their
    index entries)."""
    columns = [f for f in Schedule._meta.concrete_fields if not getattr(f, "generated", False)]
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in columns)
    event_columns = "id, host_id, aggregate_id, aggregate_type, aggregate_version, event_type,"
    event_columns += " event_ts, payload, metadata"
    with transaction.atomic(), connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(f"COPY {Schedule._meta.db_table} ({names}) FROM STDIN") as copy:
            copy.write(schedules)
        with raw.copy(f"COPY {Event._meta.db_table} ({event_columns}) FROM STDIN") as copy:
            copy.write(events)


if __name__ == "__main__":
    main()
