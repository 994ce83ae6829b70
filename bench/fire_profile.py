"""Where a drain's time goes: the fire path's own ``fire_batch()`` in this process, each
statement timed per batch, with the server's I/O and WAL counters before and after.

    .venv/bin/python bench/fire_profile.py --sizes 10000,10000,10000,1000000
    .venv/bin/python bench/fire_profile.py --no-autovacuum    # diagnosis only

For each size: schedules made as ``fire_bench.py`` makes them (time-ordered ids, one hourly
grid, all due, ``VACUUM ANALYZE``), a lease row for this process, then ``fire_batch()`` in a
loop (one transaction per batch of ``--batch-size``) until nothing is due. Prints fires/s,
and per tenth of the drain the milliseconds per 1,000 fires of the claim, the rest of the
batch in Python (``plan()``, the fence), the write statement and the commit;
``pg_stat_io`` (buffers the scheduler's backend and autovacuum evicted, wrote and read per
1,000 fires), ``pg_stat_wal`` (bytes and full-page images per fire) and the tables' sizes.
The last size's rate is compared with the median of the others (the 10,000 bursts).

``--no-autovacuum`` turns autovacuum off on the three tables for the run (never a production
setting: it shows autovacuum's share). Runs against a ``dsched_fire_profile`` database
(embedded PostgreSQL unless DATABASE_URL is set); the server's counters are server-wide, so
nothing else should run on that server meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

os.environ["DEBUG"] = "False"  # no query log: a production scheduler
configure("dsched_fire_profile")

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from django_dsched.conf import app_settings  # noqa: E402
from django_dsched.firing.batch import fire_batch  # noqa: E402
from django_dsched.firing.fence import Fence  # noqa: E402
from django_dsched.models import ids  # noqa: E402
from django_dsched.runtime.loops import NO_JIT, bound_transaction, hold_bounds  # noqa: E402

# --jit: the batches run with the server's JIT setting (as before runtime.loops.NO_JIT).
JIT = False

TABLES = ("schedule_t", "event_store_t", "outbox_message_t")


def sql(query: str, params: Any = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


class TimedCursor:
    """A cursor that adds each statement's time to ``claim``, ``write`` or ``other``."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.times: dict[str, float] = {"claim": 0.0, "write": 0.0, "other": 0.0}

    def execute(self, query: str, params: Any = None) -> None:
        started = time.perf_counter()
        self.cursor.execute(query, params)
        if query.lstrip().startswith(("SELECT schedule_id", "WITH RECURSIVE since")):
            key = "claim"
        elif "INSERT INTO outbox_message_t" in query:
            key = "write"
        else:
            key = "other"
        self.times[key] += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


IO = """SELECT coalesce(sum(evictions), 0)::float8, coalesce(sum(writes), 0)::float8,
                coalesce(sum(reads), 0)::float8
         FROM pg_stat_io WHERE backend_type = %s"""
WAL = "SELECT wal_bytes::float8, wal_fpi::float8 FROM pg_stat_wal"


def counters() -> tuple[Any, Any, Any]:
    if connection.pg_version < 160000:  # no pg_stat_io (a stock PostgreSQL 15): I/O unknown
        unknown = (float("nan"),) * 3
        return unknown, unknown, sql(WAL)[0]
    sql("SELECT pg_stat_force_next_flush()")
    time.sleep(1.2)  # other backends flush their statistics at most once a second
    return sql(IO, ["client backend"])[0], sql(IO, ["autovacuum worker"])[0], sql(WAL)[0]


def leaves() -> list[str]:
    """The tables that hold rows: schedule_t, and the history tables' partitions (storage
    parameters are set on those, not on a partitioned table)."""
    return [
        name
        for table in TABLES
        for (name,) in sql(
            "SELECT relid::regclass::text FROM pg_partition_tree(%s) WHERE isleaf", [table]
        )
        or [(table,)]
    ]


def make_due(count: int, autovacuum: bool) -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")
    for table in leaves():
        sql(f"ALTER TABLE {table} SET (autovacuum_enabled = {str(autovacuum).lower()})")
    chunk = 100_000
    for offset in range(0, count, chunk):
        sql(
            f"""
            INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
                event_data)
            SELECT {ids.sql("i - 1")}, '00000000-0000-0000-0000-000000000000', 'bench-' || i,
                   'HOURS', 1, now() - interval '30 minutes', now() - interval '30 minutes',
                   now() - interval '30 minutes', 'bench', 'bench.tick',
                   jsonb_build_object('n', i)
            FROM generate_series(%s + 1, %s + %s) AS i
            """,
            [offset, offset, min(chunk, count - offset)],
        )
    sql("VACUUM ANALYZE schedule_t")
    sql("CHECKPOINT")


def drain(count: int, batch_size: int, autovacuum: bool) -> float:
    make_due(count, autovacuum)
    lease = app_settings.LEASE_ID
    sql(
        "INSERT INTO scheduler_lock_t (lock_id, instance_id, epoch, last_heartbeat,"
        " acquired_ts, holder_pid, buckets)"
        " VALUES (%s, 'profile', 1, clock_timestamp(), clock_timestamp(), 0, 1)",
        [lease],
    )
    fence = Fence(lease, "profile", 1, 3600.0)
    before = counters()
    batches: list[tuple[float, float, float, float, int]] = []  # claim, rest, write, commit, n
    started = time.perf_counter()
    while True:
        begun = time.perf_counter()
        with transaction.atomic():
            with connection.cursor() as cursor:
                # The settings of the scheduler's own transactions (runtime.loops): JIT off.
                if not JIT:
                    bound_transaction(cursor, {**NO_JIT, **hold_bounds(3600.0)})
                timed = TimedCursor(cursor)
                result = fire_batch(timed, fence, batch_size)
            written = time.perf_counter()
        committed = time.perf_counter()
        if not result.claimed:
            break
        if result.fenced:
            raise SystemExit("fenced: the lease row was lost")
        claim, write = timed.times["claim"], timed.times["write"]
        rest = written - begun - claim - write
        batches.append((claim, rest, write, committed - written, result.fired))
    elapsed = time.perf_counter() - started
    after = counters()
    fired = sum(b[4] for b in batches)
    rate = fired / elapsed
    per = fired / 1000
    io = [
        [(a - b) / per for a, b in zip(x, y, strict=True)]
        for x, y in zip(after, before, strict=True)
    ]
    print(
        f"{count:,} due: {rate:,.0f} fires/s ({elapsed:.1f} s); per 1,000 fires: backend "
        f"evicted/wrote/read {io[0][0]:.0f}/{io[0][1]:.0f}/{io[0][2]:.0f} buffers, autovacuum "
        f"{io[1][0]:.0f}/{io[1][1]:.0f}/{io[1][2]:.0f}; WAL {io[2][0] / 1000:,.0f} B and "
        f"{io[2][1] / 1000:.3f} full-page images per fire; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    parts = 10 if len(batches) >= 20 else 1
    step = len(batches) // parts
    for part in range(parts):
        chunk = batches[part * step : (part + 1) * step]
        thousands = sum(b[4] for b in chunk) / 1000
        claim, rest, write, commit = (sum(b[i] for b in chunk) * 1000 / thousands for i in range(4))
        print(
            f"  tenth {part + 1:2d}: claim {claim:.1f}, plan and the rest {rest:.1f}, write "
            f"{write:.1f}, commit {commit:.1f} ms per 1,000 fires "
            f"({1000 / (claim + rest + write + commit) * 1000:,.0f} fires/s)"
            if parts > 1
            else f"  claim {claim:.1f}, plan and the rest {rest:.1f}, write {write:.1f}, "
            f"commit {commit:.1f} ms per 1,000 fires",
            flush=True,
        )
    sizes = sql(
        "SELECT t, coalesce((SELECT sum(pg_total_relation_size(relid))"
        " FROM pg_partition_tree(t)), pg_total_relation_size(t))::bigint / 1048576"
        " FROM unnest(%s::regclass[]) AS t ORDER BY 1::text",
        [list(TABLES)],
    )
    print("  total sizes: " + ", ".join(f"{name} {mb} MB" for name, mb in sizes), flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,10000,10000,1000000")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--no-autovacuum", action="store_true")
    parser.add_argument("--jit", action="store_true", help="the server's JIT setting (diagnosis)")
    options = parser.parse_args()
    global JIT
    JIT = options.jit
    call_command("migrate", verbosity=0)
    (buffers,) = sql("SELECT current_setting('shared_buffers')")[0]
    print(
        f"shared_buffers {buffers}; autovacuum {'off' if options.no_autovacuum else 'on'}",
        flush=True,
    )
    sizes = [int(n) for n in options.sizes.split(",")]
    rates = [drain(n, options.batch_size, not options.no_autovacuum) for n in sizes]
    for table in leaves():
        sql(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    if len(rates) > 1:
        base = statistics.median(rates[:-1])
        print(f"last size / median of the others: {rates[-1] / base:.2f}")


if __name__ == "__main__":
    main()
