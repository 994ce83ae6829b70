"""What bounds bench/create_bench.py on this machine: the creates' own SQL with no Python.

    .venv/bin/python bench/create_ceiling.py --runs 5

Prints, per run and as medians:

- ``bulk statement alone``: the exact ``INSERT`` that ``api.bulk_create`` sends (schedules
  and their "created" events; captured from the code), 20 statements of 5,000 rows with
  parameters built beforehand (fresh ids), one transaction: 100,000 rows with no
  validation and no model instances. ``bulk_create`` cannot beat it.
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

from django_dsched import api, creates, single_insert

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

ROWS = 5_000
STATEMENTS = 20


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    call_command("migrate", verbosity=0)
    bench.reset()
    preparer = creates.Preparer()
    bulk_sql, bulk_params = capture(
        lambda: creates.insert(
            [preparer.prepare(spec) for spec in bench.specs(0, ROWS)],  # type: ignore[arg-type]
            actor=None,
        )
    )
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
    figures: dict[str, list[float]] = {
        "bulk statement alone (100,000 rows)": [],
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
        with transaction.atomic(), connection.cursor() as cursor:
            for params in batches:
                cursor.execute(bulk_sql, params)
                cursor.fetchall()
        figures["bulk statement alone (100,000 rows)"].append(
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


if __name__ == "__main__":
    main()
