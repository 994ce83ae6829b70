"""Benchmark of high availability on a real Patroni cluster (etcd, two PostgreSQL nodes).

    .venv/bin/python bench/failover_bench.py failover --runs 5    # time to fire again
    .venv/bin/python bench/failover_bench.py sync-cost --runs 5   # synchronous standby's cost

Needs Debian's patroni, etcd-server and postgresql-15 (scripts/test.sh installs them) and
root or a user PostgreSQL may run as; the cluster is the failover tests' (tests/patroni.py),
here with fsync on.

``failover``: each run makes a database with ``--schedules`` per-second schedules, starts
three ``run_scheduler`` processes of the example project (its defaults: a 5 s lease) on the
multi-host URL (``target_session_attrs=read-write``), lets them fire, SIGKILLs every process
of the primary (Patroni, the postmaster and its backends), and measures on this machine's
clock: the kill to the standby accepting writes (Patroni's promotion: its leader key's TTL,
5 s here, then a loop), and the kill to the first fire on the new primary (the first event
of the new timeline). Then the killed node rejoins (pg_rewind) for the next run. Prints
each run and the medians; checks that no (schedule, slot) fired twice on the survivor.

``sync-cost``: a burst of ``--burst`` (50,000) due hourly schedules drained by one ``run_scheduler``
on the primary, with the standby synchronous (Patroni's synchronous_mode: every commit
waits for the standby's flush) and asynchronous, alternating, ``--runs`` each; the figure is
the burst's fires/s from the events' statement times, as ``fire_bench.py burst`` computes
it. Both nodes share this machine's two cores and disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")  # tests.patroni's imports

from tests.helpers import wait_for  # noqa: E402
from tests.patroni import PatroniCluster, query, start_cluster  # noqa: E402

TEMPLATE = "dsched_bench_template"
TIMELINE = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint"


def manage(url: str, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = log.open("w") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), *args],
        env={
            **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
            "DATABASE_URL": url,
        },
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def make_template(cluster: PatroniCluster) -> None:
    primary = cluster.primary()
    query(primary.pg_port, f"CREATE DATABASE {TEMPLATE}")
    migrate = manage(cluster.url(TEMPLATE), "migrate", "-v", "0")
    if migrate.wait(600) != 0:
        raise SystemExit("migrate failed")


def new_database(cluster: PatroniCluster, name: str) -> int:
    port = cluster.primary().pg_port
    query(port, f"DROP DATABASE IF EXISTS {name}")
    query(port, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return port


def insert_schedules(port: int, name: str, count: int, unit: str, start: str) -> None:
    query(
        port,
        f"""
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data)
        SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000', 'bench-' || i,
               '{unit}', 1, {start}, {start}, {start}, 'bench', 'bench.tick',
               jsonb_build_object('n', i)
        FROM generate_series(1, {count}) AS i
        """,
        name,
        timeout=10,
    )
    query(port, "VACUUM ANALYZE schedule_t", name)


def failover_run(cluster: PatroniCluster, run: int, schedules: int, logs: Path) -> dict:
    cluster.rejoin()
    cluster.set_synchronous(True)
    name = f"dsched_failover_{run}"
    port = new_database(cluster, name)
    start = "date_trunc('second', clock_timestamp()) + interval '1 s'"
    insert_schedules(port, name, schedules, "SECONDS", start)
    url = cluster.url(name)
    primary = cluster.primary()
    standby = cluster.standby_of(primary)
    processes = [
        manage(url, "run_scheduler", f"--instance-id=s{i}", log=logs / f"run{run}-s{i}.log")
        for i in (1, 2, 3)
    ]

    def fired() -> int:
        return query(primary.pg_port, "SELECT count(*) FROM event_store_t", name)[0][0]

    try:
        wait_for(lambda: fired() >= 5 * schedules, timeout=120, what="fires")
        killed = time.time()
        primary.kill()
        wait_for(standby.writable, timeout=120, what="the promotion")
        promoted = time.time() - killed
        timeline = query(standby.pg_port, f"SELECT {TIMELINE}")[0][0]
        first = wait_for(
            lambda: query(
                standby.pg_port,
                "SELECT extract(epoch FROM min(event_ts))::float8 FROM event_store_t"
                f" WHERE (metadata->>'timeline')::int = {int(timeline)}",
                name,
            )[0][0],
            timeout=120,
            what="a fire on the new primary",
        )
        time.sleep(2)
        died = [i for i, p in enumerate(processes, 1) if p.poll() is not None]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    duplicates = query(
        standby.pg_port,
        "SELECT count(*) FROM (SELECT FROM event_store_t WHERE scheduled_ts IS NOT NULL"
        " GROUP BY aggregate_id, scheduled_ts HAVING count(*) > 1) d",
        name,
    )[0][0]
    result = {
        "promoted": promoted,
        "first_fire": first - killed,
        "after_promotion": first - killed - promoted,
        "duplicates": duplicates,
        "died": died,
    }
    print(
        f"  run {run}: promoted {promoted:.2f} s after the kill; first fire on the new primary "
        f"{first - killed:.2f} s after it ({first - killed - promoted:.2f} s after the "
        f"promotion); duplicates {duplicates}; processes died {died or 'none'}",
        flush=True,
    )
    return result


def failover(runs: int, schedules: int) -> None:
    cluster = start_cluster(synchronous=True, fsync=True)
    logs = Path(tempfile.mkdtemp(prefix="dsched-failover-bench-"))
    try:
        make_template(cluster)
        results = [failover_run(cluster, run, schedules, logs) for run in range(1, runs + 1)]
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
    median = {k: statistics.median(r[k] for r in results) for k in results[0] if k != "died"}
    print(
        f"failover: {schedules} per-second schedules, 3 schedulers (lease 5 s), synchronous "
        f"standby, {runs} runs: median {median['promoted']:.2f} s from the kill to the "
        f"promotion, {median['first_fire']:.2f} s to the first fire on the new primary "
        f"(max {max(r['first_fire'] for r in results):.2f} s), "
        f"{median['after_promotion']:.2f} s after the promotion; "
        f"duplicates {sum(r['duplicates'] for r in results)}; logs in {logs}",
        flush=True,
    )


def burst_run(cluster: PatroniCluster, synchronous: bool, burst: int, run: int) -> float:
    cluster.rejoin()
    cluster.set_synchronous(synchronous)
    name = "dsched_burst"
    port = new_database(cluster, name)
    insert_schedules(port, name, burst, "HOURS", "now() - interval '30 minutes'")
    process = manage(cluster.url(name), "run_scheduler", "--instance-id=burst", "-v", "0")
    try:
        wait_for(
            lambda: query(port, "SELECT count(*) FROM event_store_t", name)[0][0] >= burst,
            timeout=600,
            what="the burst",
        )
    finally:
        process.terminate()
        process.wait(30)
    span, batches = query(
        port,
        "SELECT extract(epoch FROM max(event_ts) - min(event_ts))::float8,"
        " count(DISTINCT event_ts) FROM event_store_t",
        name,
    )[0]
    rate = burst / span * (batches - 1) / batches
    mode = "synchronous" if synchronous else "asynchronous"
    print(f"  run {run} {mode}: {rate:,.0f} fires/s ({batches} batches)", flush=True)
    return rate


def sync_cost(runs: int, burst: int) -> None:
    cluster = start_cluster(synchronous=True, fsync=True)
    try:
        make_template(cluster)
        rates: dict[bool, list[float]] = {True: [], False: []}
        for run in range(1, runs + 1):
            for synchronous in (run % 2 == 1, run % 2 == 0):  # alternate which goes first
                rates[synchronous].append(burst_run(cluster, synchronous, burst, run))
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(
        f"sync-cost: a burst of {burst:,} due schedules, {runs} runs each: synchronous standby "
        f"{on:,.0f} fires/s, asynchronous {off:,.0f} fires/s (median; synchronous/asynchronous "
        f"= {on / off:.2f})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["failover", "sync-cost"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--burst", type=int, default=50_000)
    args = parser.parse_args()
    if args.what == "failover":
        failover(args.runs, args.schedules)
    else:
        sync_cost(args.runs, args.burst)


if __name__ == "__main__":
    main()
