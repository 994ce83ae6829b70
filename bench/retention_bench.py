"""Retention of one day of history: dropping the day's partitions against deleting its rows.

    .venv/bin/python bench/retention_bench.py --rows 1000000 --runs 3
    .venv/bin/python bench/retention_bench.py --rows 100000 --runs 3      # quick
    .venv/bin/python bench/retention_bench.py claim --rows 1000000        # the relay's claim

``retention`` (the default): one day, 60 days old, holding ``--rows`` events and as many
DELIVERED messages (fires as the fire path writes them: ids by the event-id rule, a
CloudEvents payload of about 400 bytes in the event, the message delivered a minute after
its slot). Each round loads the day twice and removes it with retention (``purge_expired``
with ``DSCHED_RETENTION_DAYS`` 45) in two ways, the order alternating between rounds:

* ``drop``: the day has its own partitions (``make_day``): retention detaches them, then
  drops the detached tables (also printed: the time before that drop, which includes the
  detach, the only step holding the parents' lock);
* ``delete``: the same rows in the default partitions (the day was never made): retention
  deletes them in batches of ``DSCHED_RETENTION_BATCH_SIZE`` (1,000), the statements the
  unpartitioned tables were purged with (a plain table, the same indexes).

Per way: the time of the ``purge_expired`` call, the WAL it wrote (``pg_current_wal_lsn()``
before and after, a ``CHECKPOINT`` first, so full-page images are counted as in production),
and the two tables' size afterwards (``pg_total_relation_size`` summed over the partitions):
a DELETE leaves its table's pages (dead rows) until VACUUM. Medians over ``--runs``.

``claim``: ``--rows`` messages waiting (on a backoff or under a claim) spread over 30 day
partitions, and 100 claimable ones: ``EXPLAIN (ANALYZE, BUFFERS)`` of the relay's claim:
execution time, buffers, rows read from ``outbox_message_t``.

Runs against a ``dsched_retention_bench`` database (on the embedded PostgreSQL unless
DATABASE_URL is set). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"

from setup_django import configure

configure("dsched_retention_bench")

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_dsched.history import event_ids, expiry, partitions  # noqa: E402
from django_dsched.history.partitions import EVENTS, OUTBOX, make_day  # noqa: E402
from django_dsched.outbox import claims  # noqa: E402
from django_dsched.outbox.claims import CLAIM  # noqa: E402
from django_dsched.outbox.messages import Claimer  # noqa: E402
from django_dsched.outbox.retention import purge_expired  # noqa: E402
from tests.outbox_helpers import waiting_over_days_sql  # noqa: E402

AGE_DAYS = 60
SCHEDULES = 1000

# One day of fires: SCHEDULES schedules, each fired every SCHEDULES/rows of the day.
LOAD = f"""
WITH f AS (
    SELECT n, ('00000000-0000-7000-8000-' || lpad(to_hex(n %% {SCHEDULES}), 12, '0'))::uuid
               AS schedule_id,
           %(start)s::timestamptz + (n * (86400000000 / %(rows)s)) * interval '1 microsecond'
               AS slot
    FROM generate_series(0, %(rows)s - 1) AS n
), g AS (
    SELECT f.*, {event_ids.sql("f.schedule_id", "(extract(epoch FROM f.slot) * 1000000)::bigint")}
               AS id
    FROM f
), e AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
        event_type, event_ts, payload, metadata, scheduled_ts, leader_epoch)
    SELECT id, '00000000-0000-0000-0000-000000000000', schedule_id, 'Schedule', n + 2,
           'report.build', slot + interval '20 ms',
           jsonb_build_object('specversion', '1.0', 'id', id, 'type', 'report.build',
               'source', '/django-dsched/00000000-0000-0000-0000-000000000000',
               'subject', schedule_id, 'time', slot, 'datacontenttype', 'application/json',
               'scheduledtime', slot, 'data', jsonb_build_object('format', 'pdf', 'n', n)),
           jsonb_build_object('instance_id', 'bench', 'leader_epoch', 1, 'timeline', 1,
               'schedule_name', 'bench-' || (n %% {SCHEDULES}), 'priority', 0,
               'trigger', 'schedule'),
           slot, 1
    FROM g
    RETURNING id, host_id, aggregate_id, aggregate_version, event_type, event_ts
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status, attempts, delivered_ts, picked_ts, started_ts,
    completed_ts)
SELECT id, host_id, aggregate_id, 'Schedule', aggregate_version, event_type, event_ts,
       'reports', 'DELIVERED', 1, event_ts + interval '1 minute',
       event_ts + interval '1 s', event_ts + interval '2 s', event_ts + interval '3 s'
FROM e
"""


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def today() -> date:
    return sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]  # type: ignore[no-any-return]


def history_bytes() -> int:
    """Heap, indexes and TOAST of both tables, over every partition."""
    (size,) = sql(
        "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i"
        " WHERE i.inhparent = ANY(ARRAY[%s, %s]::regclass[])",
        [EVENTS, OUTBOX],
    )[0]
    return int(size)


def empty() -> None:
    sql("TRUNCATE event_store_t, outbox_message_t")
    day = today() - timedelta(days=AGE_DAYS)
    for table in (OUTBOX, EVENTS):
        sql(f"DROP TABLE IF EXISTS {partitions.partition(table, day)}")
    sql("VACUUM ANALYZE event_store_t_default, outbox_message_t_default")


def load(rows: int, own_partition: bool) -> date:
    day = today() - timedelta(days=AGE_DAYS)
    if own_partition:
        make_day(day)
    start = f"{day.isoformat()}T00:00:00Z"
    sql(LOAD, {"rows": rows, "start": start})
    sql("VACUUM ANALYZE event_store_t, outbox_message_t")
    return day


def measure(way: str, rows: int) -> dict[str, float]:
    empty()
    load(rows, own_partition=way == "drop")
    before_size = history_bytes()
    sql("CHECKPOINT")
    (lsn,) = sql("SELECT pg_current_wal_lsn()")[0]
    dropping = []  # the second transaction's time: the detached tables' drop
    real_drop = expiry.drop_detached

    def timed_drop(using: str | None = None) -> list[str]:
        began = time.perf_counter()
        try:
            return real_drop(using)
        finally:
            dropping.append(time.perf_counter() - began)

    expiry.drop_detached = timed_drop  # type: ignore[assignment]
    started = time.perf_counter()
    try:
        purged = purge_expired(days=45)
    finally:
        expiry.drop_detached = real_drop  # type: ignore[assignment]
    seconds = time.perf_counter() - started
    (wal,) = sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn])[0]
    left = sql(
        "SELECT (SELECT count(*) FROM event_store_t), (SELECT count(*) FROM outbox_message_t)"
    )[0]
    assert left == (0, 0), (way, left, purged)
    return {
        "seconds": seconds,
        # Everything but dropping the detached tables: the days asked, the default partitions'
        # (empty) DELETE passes, and the detach, the one step holding the parents' lock.
        "locked_s": seconds - sum(dropping) if way == "drop" else seconds,
        "wal_mb": float(wal) / 1e6,
        "size_before_mb": before_size / 1e6,
        "size_after_mb": history_bytes() / 1e6,
    }


def retention(rows: int, runs: int) -> None:
    results: dict[str, list[dict[str, float]]] = {"drop": [], "delete": []}
    for run in range(runs):
        for way in ("drop", "delete") if run % 2 == 0 else ("delete", "drop"):
            result = measure(way, rows)
            results[way].append(result)
            print(
                f"run {run + 1} {way:<6} {result['seconds']:8.3f} s (before the detached tables'"
                f" drop {result['locked_s']:.3f} s)  WAL {result['wal_mb']:9.2f} MB"
                f"  size {result['size_before_mb']:8.1f} -> {result['size_after_mb']:8.1f} MB",
                flush=True,
            )
    empty()
    print(f"\nmedians of {runs} runs, one day of {rows:,} events + {rows:,} delivered messages:")
    for way, found in results.items():
        med = {key: statistics.median(r[key] for r in found) for key in found[0]}
        print(
            f"  {way:<6} {med['seconds']:8.3f} s (before the detached tables' drop"
            f" {med['locked_s']:.3f} s)  WAL {med['wal_mb']:9.2f} MB"
            f"  tables after {med['size_after_mb']:8.1f} MB (before {med['size_before_mb']:.1f} MB)"
        )


CLAIM_WAITING = waiting_over_days_sql(30)
CLAIM_READY = f"""
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status)
SELECT {event_ids.change_sql("ts")}, '00000000-0000-0000-0000-000000000000',
       gen_random_uuid(), 'Schedule', 1, 'report.build', ts, 'reports', 'PENDING'
FROM (SELECT statement_timestamp() - interval '60 s' + n * interval '1 ms' AS ts
      FROM generate_series(1, 100) AS n) g
"""


def claim(rows: int, runs: int) -> None:
    empty()
    days = [today() - timedelta(days=n) for n in range(1, 32)]
    for day in days:
        if day not in partitions.days():
            make_day(day)
    sql(CLAIM_WAITING, {"count": rows})
    sql(CLAIM_READY)
    sql("VACUUM ANALYZE outbox_message_t")
    batch = 50
    with connection.cursor() as cursor:
        ids = claims.pending_ids(cursor) or claims.ALL_IDS
    params = {**claims.claim_args(Claimer("bench", 30.0, 5), batch, 8 * 1024 * 1024), **ids}
    partitions_now = sql(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_message_t'::regclass"
    )[0][0]
    times, buffers, read = [], [], []
    for _ in range(runs):
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM, params)
            (plan,) = cursor.fetchone()
            cursor.execute("ROLLBACK")
        plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]
        times.append(plan["Execution Time"])
        top = plan["Plan"]
        buffers.append(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
        total = 0

        def walk(node: dict[str, Any]) -> None:
            nonlocal total
            if (
                node.get("Relation Name", "").startswith(OUTBOX)
                and node["Node Type"] != "ModifyTable"
            ):
                total += int(
                    (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
                    * node["Actual Loops"]
                )
            for child in node.get("Plans", []):
                walk(child)

        walk(top)
        read.append(total)
    print(
        f"claim of {batch} with {rows:,} waiting over 30 days ({partitions_now} partitions):"
        f" median {statistics.median(times):.2f} ms, {statistics.median(buffers):.0f} buffers,"
        f" {statistics.median(read):.0f} rows read from outbox_message_t ({runs} runs)"
    )
    empty()
    for day in days:
        if day < today() - timedelta(days=0):
            for table in (OUTBOX, EVENTS):
                sql(f"DROP TABLE IF EXISTS {partitions.partition(table, day)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="?", default="retention", choices=["retention", "claim"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if args.what == "retention":
        retention(args.rows, args.runs)
    else:
        claim(args.rows, args.runs)


if __name__ == "__main__":
    main()
