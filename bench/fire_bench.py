"""Benchmark of the fire path: throughput, steady-state lag, memory.

    .venv/bin/python bench/fire_bench.py                 # all three, defaults below
    .venv/bin/python bench/fire_bench.py burst --schedules 10000 --runs 3
    .venv/bin/python bench/fire_bench.py steady --schedules 1000 --seconds 30
    .venv/bin/python bench/fire_bench.py memory --schedules 1000000
    .venv/bin/python bench/fire_bench.py burst --metrics    # the same with --metrics-port

Each measurement runs a real ``run_scheduler`` process against a ``dsched_bench`` database
(on the embedded PostgreSQL unless DATABASE_URL is set) and reads the results from the
database: ``event_ts`` is the database time of the statement that wrote the fire, and
``scheduled_ts`` its grid slot. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import ROOT, configure

URL = configure("dsched_bench")

import django  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402


def sql(query: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def reset() -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


def insert_schedules(count: int, unit: str, every: int, start_sql: str) -> None:
    """Insert ``count`` schedules in chunks, all on the same grid."""
    chunk = 100_000
    for offset in range(0, count, chunk):
        size = min(chunk, count - offset)
        sql(
            f"""
            INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
                event_data)
            SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000',
                   'bench-' || (i + %s), %s, %s, {start_sql}, {start_sql}, {start_sql},
                   'bench', 'bench.tick', jsonb_build_object('n', i)
            FROM generate_series(1, %s) AS i
            """,
            [offset, unit, every, size],
        )
    sql("ANALYZE schedule_t")


# --metrics: run the scheduler with its Prometheus metrics on (docs/observability.md).
METRICS = False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_scheduler(*args: str) -> subprocess.Popen[bytes]:
    if METRICS:
        args = (*args, f"--metrics-port={free_port()}")
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "example_project" / "manage.py"),
            "run_scheduler",
            "--instance-id=bench",
            "-v",
            "0",
            *args,
        ],
        env={**os.environ, "DATABASE_URL": URL},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def wait_count(expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sql("SELECT count(*) FROM event_store_t")[0][0] < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {expected} fires")
        time.sleep(0.05)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def burst(schedules: int, runs: int, batch_size: int) -> None:
    """Fires/s for one scheduler draining ``schedules`` due hourly schedules."""
    rates: list[float] = []
    walls: list[float] = []
    for run in range(runs):
        reset()
        insert_schedules(schedules, "HOURS", 1, "now() - interval '30 minutes'")
        spawned = time.monotonic()
        process = start_scheduler(f"--batch-size={batch_size}")
        wait_count(schedules, timeout=600)
        walls.append(time.monotonic() - spawned)
        stop(process)
        (span,) = sql(
            "SELECT extract(epoch FROM max(event_ts) - min(event_ts)) FROM event_store_t"
        )[0]
        (batches,) = sql("SELECT count(DISTINCT event_ts) FROM event_store_t")[0]
        # The first batch's own duration is not in the span: scale by batches/(batches-1).
        rate = schedules / float(span) * (batches - 1) / batches if batches > 1 else float("nan")
        rates.append(rate)
        print(f"  run {run + 1}: {rate:,.0f} fires/s ({batches} batches in {float(span):.3f} s)")
    dups = sql(
        "SELECT count(*) FROM (SELECT 1 FROM event_store_t GROUP BY aggregate_id,"
        " scheduled_ts HAVING count(*) > 1) d"
    )[0][0]
    wall = statistics.median(walls)
    print(
        f"burst: {schedules:,} due schedules, batch {batch_size}: median "
        f"{statistics.median(rates):,.0f} fires/s while firing (min {min(rates):,.0f}, "
        f"max {max(rates):,.0f}) over {runs} runs; all fired {wall:.2f} s after spawning "
        f"the process (median: {schedules / wall:,.0f} fires/s with start-up); "
        f"duplicates {dups}"
    )


def steady(schedules: int, seconds: int) -> None:
    """Lag of fires for ``schedules`` schedules every second, for ``seconds`` seconds."""
    reset()
    insert_schedules(schedules, "SECONDS", 1, "date_trunc('second', now()) + interval '3 seconds'")
    (t0,) = sql("SELECT min(start_ts) FROM schedule_t")[0]
    process = start_scheduler()
    wait_count(schedules * seconds, timeout=seconds + 60)
    rss = peak_rss_mb(process.pid)
    stop(process)
    rows = sql(
        "SELECT extract(epoch FROM event_ts - scheduled_ts) * 1000 FROM event_store_t"
        " WHERE scheduled_ts < %s + make_interval(secs => %s) ORDER BY 1",
        [t0, seconds],
    )
    lags = [float(r[0]) for r in rows]
    q = statistics.quantiles(lags, n=100)
    print(
        f"steady: {schedules:,} schedules every 1 s for {seconds} s: {len(lags):,} fires "
        f"(expected {schedules * seconds:,}); lag p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, "
        f"max {lags[-1]:.1f} ms; scheduler peak RSS {rss:.0f} MB"
    )


def memory(schedules: int) -> None:
    """Peak RSS of a scheduler that drains ``schedules`` due schedules."""
    reset()
    started = time.monotonic()
    insert_schedules(schedules, "HOURS", 1, "now() - interval '30 minutes'")
    print(f"  inserted {schedules:,} schedules in {time.monotonic() - started:.0f} s")
    process = start_scheduler()
    started = time.monotonic()
    wait_count(schedules, timeout=1800)
    elapsed = time.monotonic() - started
    rss = peak_rss_mb(process.pid)
    stop(process)
    print(
        f"memory: {schedules:,} due schedules fired in {elapsed:.0f} s "
        f"({schedules / elapsed:,.0f} fires/s incl. start-up); scheduler peak RSS {rss:.0f} MB"
    )
    reset()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "what", nargs="?", choices=["burst", "steady", "memory", "all"], default="all"
    )
    parser.add_argument("--schedules", type=int)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--metrics", action="store_true", help="serve metrics (--metrics-port)")
    options = parser.parse_args()
    global METRICS
    METRICS = options.metrics
    call_command("migrate", verbosity=0)
    print(
        f"database: {connection.pg_version // 10000}.{connection.pg_version % 10000}, "
        f"Python {sys.version.split()[0]}, Django {django.get_version()}; "
        f"metrics {'on' if METRICS else 'off'}"
    )
    if options.what in ("burst", "all"):
        burst(options.schedules or 10_000, options.runs, options.batch_size)
    if options.what in ("steady", "all"):
        steady(options.schedules or 1_000, options.seconds)
    if options.what in ("memory", "all"):
        memory(options.schedules or 1_000_000)


if __name__ == "__main__":
    main()
