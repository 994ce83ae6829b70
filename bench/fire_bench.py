"""Benchmark of the fire path: throughput at 10,000 / 50,000 / 1,000,000 due schedules, the
hand-written ceiling, steady-state lag, memory.

    .venv/bin/python bench/fire_bench.py burst --schedules 10000 --runs 5
    .venv/bin/python bench/fire_bench.py burst --schedules 50000 --runs 5
    .venv/bin/python bench/fire_bench.py drain --schedules 1000000 --runs 5
    .venv/bin/python bench/fire_bench.py ceiling --schedules 50000 --runs 5
    .venv/bin/python bench/fire_bench.py scale --runs 5      # all of them, interleaved: ratios
    .venv/bin/python bench/fire_bench.py steady --schedules 10000 --seconds 40 --runs 3
    .venv/bin/python bench/fire_bench.py memory --schedules 1000000
    .venv/bin/python bench/fire_bench.py burst --metrics    # the same with --metrics-port

Each measurement of the product runs a real ``run_scheduler`` process against a
``dsched_bench`` database (on the embedded PostgreSQL unless DATABASE_URL is set) and reads
the results from the database: ``event_ts`` is the database time of the statement that wrote
the fire, and ``scheduled_ts`` its grid slot. Prints figures; asserts nothing.

Schedules are created in SQL (``INSERT ... SELECT generate_series``) with time-ordered ids,
as the package's default (``django_dsched.models.ids.uuid7``) makes them; ``--random-ids`` gives
them random (version 4) ids instead, as schedules created with ids of the caller's own may have.

``ceiling`` is the same work written by hand in plain psycopg on the same tables, indexes
and server: per batch of 500 (one transaction), a ``SELECT ... FOR UPDATE SKIP LOCKED`` of
due schedules, then per fire an INSERT into ``event_store_t`` (the schedule's event data as
payload), one into ``outbox_message_t`` (the same event ids; the payload only in the event,
as the product stores it; both multi-row, from ``unnest``) and an UPDATE of ``schedule_t``
(one statement each). Its rate is measured
like the product's. ``scale`` runs the bursts, the drain and the ceiling at each size in
rounds (the order alternating) and prints the medians and ratios.

Rates are *fires/s while firing*: fires divided by the time from the first batch's fire
statement to the last one's (database clock), scaled by batches / (batches - 1) for the
first batch's own time.
"""

from __future__ import annotations

import argparse
import atexit
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fire_ceiling
import minimal_ceiling
from setup_django import ROOT, configure

# A production scheduler: no query log (with DEBUG on, Django keeps the last 9,000 statements,
# a fire statement's id arrays included: 340 MB at 1,000,000 fires, and time per batch).
os.environ["DEBUG"] = "False"
URL = configure(os.environ.get("BENCH_DATABASE", "dsched_bench"))

import django  # noqa: E402
import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_dsched.history import event_ids  # noqa: E402
from django_dsched.models import ids  # noqa: E402


def sql(query: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def reset() -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


# Set by --random-ids: schedules get version-4 ids (the default before UUIDv7).
RANDOM_IDS = False


def insert_schedules(count: int, unit: str, every: int, start_sql: str) -> None:
    """Insert ``count`` schedules in chunks, all on the same grid, in SQL.

    Ids as ``django_dsched.models.ids.uuid7`` makes them one after another (``--random-ids``:
    ``gen_random_uuid()``)."""
    chunk = 100_000
    new_id = "gen_random_uuid()" if RANDOM_IDS else ids.sql("i - 1")
    for offset in range(0, count, chunk):
        size = min(chunk, count - offset)
        sql(
            f"""
            INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
                event_data)
            SELECT {new_id}, '00000000-0000-0000-0000-000000000000',
                   'bench-' || i, %s, %s, {start_sql}, {start_sql}, {start_sql},
                   'bench', 'bench.tick', jsonb_build_object('n', i)
            FROM generate_series(%s + 1, %s + %s) AS i
            """,
            [unit, every, offset, offset, size],
        )
    sql("VACUUM ANALYZE schedule_t")


# --metrics: run the scheduler with its Prometheus metrics on (docs/observability.md).
METRICS = False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Every scheduler started, stopped at exit if still running: a run that timed out (a
# SystemExit) must not leave one firing into the next run's tables.
STARTED: list[subprocess.Popen[bytes]] = []


@atexit.register
def stop_all() -> None:
    for process in STARTED:
        if process.poll() is None:
            stop(process)


def start_scheduler(*args: str) -> subprocess.Popen[bytes]:
    if METRICS:
        args = (*args, f"--metrics-port={free_port()}")
    process = subprocess.Popen(
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
    STARTED.append(process)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def wait_count(expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sql("SELECT count(*) FROM event_store_t")[0][0] < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {expected} fires")
        time.sleep(0.05)


# Nothing is due any more. (Polling count(*) of a million-row table every 50 ms would
# compete with what is measured; this reads the front of the poll index.)
NOTHING_DUE = """SELECT NOT EXISTS (SELECT FROM schedule_t
                                  WHERE active AND next_run_ts <= statement_timestamp())"""


def wait_drained(expected: int, timeout: float) -> None:
    """Wait until no schedule is due, then check that ``expected`` events were written."""
    deadline = time.monotonic() + timeout
    while not sql(NOTHING_DUE)[0][0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {expected} fires")
        time.sleep(0.1)
    (written,) = sql("SELECT count(*) FROM event_store_t")[0]
    if written != expected:
        raise SystemExit(f"expected {expected} fires, found {written}")


def firing_rate(schedules: int) -> tuple[float, int, float]:
    """(fires/s while firing, batches, span in s) from the events' statement times."""
    span, batches = sql(
        "SELECT extract(epoch FROM max(event_ts) - min(event_ts)), count(DISTINCT event_ts)"
        " FROM event_store_t"
    )[0]
    # The first batch's own duration is not in the span: scale by batches/(batches-1).
    rate = schedules / float(span) * (batches - 1) / batches if batches > 1 else float("nan")
    return rate, batches, float(span)


def duplicates() -> int:
    return sql(
        "SELECT count(*) FROM (SELECT 1 FROM event_store_t GROUP BY aggregate_id,"
        " scheduled_ts HAVING count(*) > 1) d"
    )[0][0]


def wal_lsn() -> int:
    """The server's current WAL position, in bytes."""
    return int(sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])


def lsn(position: int) -> str:
    """A WAL position as PostgreSQL writes it (for pg_waldump -s/-e)."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# Set by --checkpoint: a CHECKPOINT between inserting the schedules and firing them.
CHECKPOINT = False


def checkpoint() -> None:
    """With --checkpoint, a CHECKPOINT now: the first change of each page after it writes the
    whole page to the WAL (as a schedule fired hourly does on a server checkpointing every few
    minutes), so WAL per fire does not depend on where the server's own checkpoints fall."""
    if CHECKPOINT:
        sql("CHECKPOINT")


def fire_run(schedules: int, batch_size: int) -> dict[str, float]:
    """One run of ``run_scheduler`` draining ``schedules`` due hourly schedules."""
    reset()
    insert_schedules(schedules, "HOURS", 1, "now() - interval '30 minutes'")
    checkpoint()
    before = load()
    wal_start, server_before = wal_lsn(), server_counters()
    spawned = time.monotonic()
    process = start_scheduler(f"--batch-size={batch_size}")
    wait_drained(schedules, timeout=3600)
    wall = time.monotonic() - spawned
    wal_end = wal_lsn()
    wal = (wal_end - wal_start) / schedules
    rss = peak_rss_mb(process.pid)
    stop(process)  # its backend reports its WAL counters as it ends
    time.sleep(0.5)
    server_after = server_counters()
    fpi, timed, requested = (b - a for a, b in zip(server_before, server_after, strict=True))
    rate, batches, span = firing_rate(schedules)
    print(
        f"  fire {schedules:,}: {rate:,.0f} fires/s ({batches} batches in {span:.3f} s;"
        f" all fired {wall:.2f} s after spawning; peak RSS {rss:.0f} MB; WAL {wal:,.0f} B"
        f" a fire, {fpi / schedules:.3f} full-page images a fire, {lsn(wal_start)}.."
        f"{lsn(wal_end)}; checkpoints meanwhile {timed} timed, {requested} by WAL size;"
        f" load {before})",
        flush=True,
    )
    return {"rate": rate, "wall": wall, "rss": rss, "dups": duplicates(), "wal": wal}


def server_counters() -> tuple[int, int, int]:
    """The server's full-page images written to the WAL, and its checkpoints so far (timed,
    and requested: started because the WAL since the last one neared ``max_wal_size``)."""
    return sql(
        "SELECT (SELECT wal_fpi FROM pg_stat_wal), checkpoints_timed, checkpoints_req"
        " FROM pg_stat_bgwriter"
    )[0]


def ceiling_run(schedules: int, batch_size: int) -> dict[str, float]:
    """The hand-written ceiling draining ``schedules`` due hourly schedules."""
    reset()
    insert_schedules(schedules, "HOURS", 1, "now() - interval '30 minutes'")
    checkpoint()
    before = load()
    wal = wal_lsn()
    started = time.monotonic()
    with psycopg.connect(URL, autocommit=True) as conn, conn.cursor() as cur:
        # As the fire path does: the schedules' NOTIFY trigger stays quiet.
        cur.execute("SET dsched.firing = 'on'")
        minimal_ceiling.drain(conn, cur, fire_ceiling.STATEMENTS, batch_size, event_ids.event_id)
    wall = time.monotonic() - started
    wal = (wal_lsn() - wal) / schedules
    (written,) = sql("SELECT count(*) FROM event_store_t")[0]
    if written != schedules:
        raise SystemExit(f"ceiling: expected {schedules} fires, found {written}")
    rate, batches, span = firing_rate(schedules)
    print(
        f"  ceiling {schedules:,}: {rate:,.0f} fires/s ({batches} batches in {span:.3f} s;"
        f" {wall:.2f} s in all; WAL {wal:,.0f} B a fire; load {before})",
        flush=True,
    )
    return {"rate": rate, "wall": wall, "dups": duplicates(), "wal": wal}


def minimal_run(schedules: int, batch_size: int) -> dict[str, float]:
    """The minimal ceiling (bench/minimal_ceiling.py) draining ``schedules`` due schedules."""
    reset()  # the product's tables hold nothing meanwhile, as for the other runs
    before = load()
    new_id = "gen_random_uuid()" if RANDOM_IDS else ids.sql("i - 1")
    result = minimal_ceiling.run(URL, schedules, batch_size, new_id, event_ids.event_id, CHECKPOINT)
    print(
        f"  minimal ceiling {schedules:,}: {result['rate']:,.0f} fires/s"
        f" ({result['batches']} batches in {result['span']:.3f} s; {result['wall']:.2f} s in"
        f" all; WAL {result['wal']:,.0f} B a fire; load {before})",
        flush=True,
    )
    return {**result, "dups": 0}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def burst(schedules: int, runs: int, batch_size: int, what: str = "burst") -> None:
    """Fires/s for one scheduler draining ``schedules`` due hourly schedules."""
    results = [fire_run(schedules, batch_size) for _ in range(runs)]
    rates = [r["rate"] for r in results]
    wall = statistics.median(r["wall"] for r in results)
    print(
        f"{what}: {schedules:,} due schedules, batch {batch_size}: median "
        f"{statistics.median(rates):,.0f} fires/s while firing (min {min(rates):,.0f}, "
        f"max {max(rates):,.0f}) over {runs} runs; all fired {wall:.2f} s after spawning "
        f"the process (median: {schedules / wall:,.0f} fires/s with start-up); peak RSS "
        f"{max(r['rss'] for r in results):.0f} MB; duplicates "
        f"{sum(int(r['dups']) for r in results)}"
    )


def ceiling(schedules: int, runs: int, batch_size: int, minimal: bool = False) -> None:
    run = minimal_run if minimal else ceiling_run
    rates = [run(schedules, batch_size)["rate"] for _ in range(runs)]
    print(
        f"{'minimal ' if minimal else ''}ceiling: {schedules:,} due schedules, batch"
        f" {batch_size}: median "
        f"{statistics.median(rates):,.0f} fires/s (min {min(rates):,.0f}, "
        f"max {max(rates):,.0f}) over {runs} runs"
    )


# The ceilings ``scale`` can run beside the product: by hand on the product's own tables
# (``tables``: what those tables and indexes cost) or on minimal ones (``minimal``: what a
# fire costs at the least, bench/minimal_ceiling.py).
CEILINGS = {"tables": ceiling_run, "minimal": minimal_run}


def scale(
    sizes: list[int], runs: int, batch_size: int, ceiling_batch: int, ceilings: list[str]
) -> None:
    """The fire path and each ceiling at each size, in rounds (the order alternating);
    medians and ratios, each ratio per round (the product against the ceiling measured
    beside it)."""
    kinds = ["fire path", *ceilings]
    rates: dict[tuple[str, int], list[float]] = {(k, n): [] for k in kinds for n in sizes}
    wal: dict[tuple[str, int], list[float]] = {}

    def measured(kind: str, n: int) -> None:
        if kind == "fire path":
            result = fire_run(n, batch_size)
        else:
            result = CEILINGS[kind](n, ceiling_batch)
        rates[kind, n].append(result["rate"])
        wal.setdefault((kind, n), []).append(result["wal"])

    for run in range(runs):
        print(f"round {run + 1} (load {load()})", flush=True)
        for n in sizes:
            for kind in kinds if run % 2 == 0 else reversed(kinds):
                measured(kind, n)
    base = statistics.median(rates["fire path", sizes[0]])
    print(f"scale: medians of {runs} rounds, batch {batch_size} (ceilings {ceiling_batch})")
    heads = "".join(f" {k} ceiling, fires/s | fire path / {k} (per round) |" for k in ceilings)
    print(f"| due schedules | fire path, fires/s | vs first size |{heads}")
    print("| --- | --- | --- |" + " --- | --- |" * len(ceilings))
    for n in sizes:
        mine = rates["fire path", n]
        row = f"| {n:,} | {statistics.median(mine):,.0f} ({min(mine):,.0f}-{max(mine):,.0f}) |"
        row += f" {statistics.median(mine) / base:.2f} |"
        for kind in ceilings:
            theirs = rates[kind, n]
            ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
            row += (
                f" {statistics.median(theirs):,.0f} ({min(theirs):,.0f}-{max(theirs):,.0f}) |"
                f" {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
            )
        print(row)
    for (kind, n), bytes_per_fire in sorted(wal.items()):
        print(f"WAL per fire, {kind}, {n:,}: median {statistics.median(bytes_per_fire):,.0f} B")


def steady_run(schedules: int, seconds: int) -> tuple[float, float, float]:
    """One run of ``schedules`` schedules every second for ``seconds`` seconds: lag p50, p99
    and max (ms)."""
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
        f"  steady: {len(lags):,} fires (expected {schedules * seconds:,}); lag p50 {q[49]:.1f}"
        f" ms, p99 {q[98]:.1f} ms, max {lags[-1]:.1f} ms; scheduler peak RSS {rss:.0f} MB;"
        f" load {load()}",
        flush=True,
    )
    return q[49], q[98], lags[-1]


def steady(schedules: int, seconds: int, runs: int, ceiling_batch: int) -> None:
    """Lag of fires for ``schedules`` schedules every second, for ``seconds`` seconds, in
    ``runs`` rounds; each round also times the minimal ceiling writing one second's fires
    (``schedules`` due at once), and the p99 is given as a multiple of that time."""
    results = []
    for _ in range(runs):
        p50, p99, worst = steady_run(schedules, seconds)
        one_second = schedules / minimal_run(schedules, ceiling_batch)["rate"] * 1000
        results.append((p50, p99, worst, one_second, p99 / one_second))
    medians = [statistics.median(column) for column in zip(*results, strict=True)]
    ratios = ", ".join(f"{r[4]:.2f}" for r in results)
    print(
        f"steady: {schedules:,} schedules every 1 s for {seconds} s, medians of {runs} rounds:"
        f" lag p50 {medians[0]:.1f} ms, p99 {medians[1]:.1f} ms, max {medians[2]:.1f} ms;"
        f" the minimal ceiling writes {schedules:,} fires in {medians[3]:.1f} ms;"
        f" p99 / that {medians[4]:.2f} (per round {ratios})"
    )


def memory(schedules: int) -> None:
    """Peak RSS of a scheduler that drains ``schedules`` due schedules."""
    reset()
    started = time.monotonic()
    insert_schedules(schedules, "HOURS", 1, "now() - interval '30 minutes'")
    print(f"  inserted {schedules:,} schedules in {time.monotonic() - started:.0f} s")
    process = start_scheduler()
    started = time.monotonic()
    wait_drained(schedules, timeout=1800)
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
        "what",
        nargs="?",
        choices=["burst", "drain", "ceiling", "scale", "steady", "memory", "all"],
        default="all",
    )
    parser.add_argument("--schedules", type=int)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--metrics", action="store_true", help="serve metrics (--metrics-port)")
    parser.add_argument("--ceiling-batch-size", type=int, default=500)
    parser.add_argument(
        "--sizes",
        default="50000,1000000,5000000",
        help="scale: the sizes, the first the base",
    )
    parser.add_argument(
        "--ceilings",
        default="minimal,tables",
        help="scale: the ceilings run beside the product at each size (minimal, tables)",
    )
    parser.add_argument(
        "--minimal", action="store_true", help="ceiling: on minimal tables (minimal_ceiling.py)"
    )
    parser.add_argument(
        "--random-ids", action="store_true", help="version-4 schedule ids (the old default)"
    )
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="a CHECKPOINT before each burst (WAL per fire with the pages' first images)",
    )
    options = parser.parse_args()
    global RANDOM_IDS, METRICS, CHECKPOINT
    RANDOM_IDS = options.random_ids
    METRICS = options.metrics
    CHECKPOINT = options.checkpoint
    call_command("migrate", verbosity=0)
    settings = dict(
        sql(
            "SELECT name, current_setting(name) FROM unnest(ARRAY['shared_buffers',"
            " 'max_wal_size', 'checkpoint_timeout', 'synchronous_commit', 'work_mem']) AS name"
        )
    )
    print(
        f"database: {connection.pg_version // 10000}.{connection.pg_version % 10000} "
        f"({', '.join(f'{k} {v}' for k, v in settings.items())}), Python "
        f"{sys.version.split()[0]}, Django {django.get_version()}, "
        f"{'random' if RANDOM_IDS else 'time-ordered'} schedule ids, "
        f"metrics {'on' if METRICS else 'off'}, load {load()}"
    )
    if options.what == "drain":
        burst(options.schedules or 1_000_000, options.runs, options.batch_size, "drain")
    if options.what == "ceiling":
        ceiling(
            options.schedules or 10_000, options.runs, options.ceiling_batch_size, options.minimal
        )
    if options.what == "scale":
        sizes = [int(n) for n in options.sizes.split(",")]
        ceilings = [c for c in options.ceilings.split(",") if c]
        scale(sizes, options.runs, options.batch_size, options.ceiling_batch_size, ceilings)
    if options.what in ("burst", "all"):
        burst(options.schedules or 10_000, options.runs, options.batch_size)
    if options.what in ("steady", "all"):
        steady(
            options.schedules or 1_000, options.seconds, options.runs, options.ceiling_batch_size
        )
    if options.what in ("memory", "all"):
        memory(options.schedules or 1_000_000)


if __name__ == "__main__":
    main()
