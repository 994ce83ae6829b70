"""Benchmark of buckets: a burst of due schedules fired by 1, 2 and 3 instances.

    .venv/bin/python bench/bucket_bench.py                       # 50,000 schedules, 5 runs
    .venv/bin/python bench/bucket_bench.py --schedules 10000 --runs 3 --buckets 64

For each configuration, every run: start the instances (real ``run_scheduler`` processes,
DSCHED_BUCKETS set), wait until the buckets are split among them (each holds the buckets it
owns), insert the schedules all due at one instant a few seconds ahead, and wait until all
fired. The figure is the burst's rate: schedules / (last fire - due time), both on the
database clock (``event_ts`` is the time of the statement that wrote the fire). Configs: one
instance with DSCHED_BUCKETS = 1 (the single leader), then 1, 2 and 3 instances with
``--buckets``. Prints figures and ratios to one instance; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import ROOT, configure

URL = configure("dsched_bench")

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

LEASE_STRIDE = 1 << 16


def sql(query: str, params: object = None) -> list[tuple[object, ...]] | None:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def start(name: str, buckets: int, batch_size: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "django",
            "run_scheduler",
            "--settings=bucket_settings",
            f"--instance-id={name}",
            f"--batch-size={batch_size}",
            "-v",
            "0",
        ],
        cwd=ROOT / "bench",
        env={
            **os.environ,
            "DATABASE_URL": URL,
            "DSCHED_BUCKETS": str(buckets),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def split(buckets: int, instances: int) -> bool:
    rows = sql(
        "SELECT count(*), count(DISTINCT instance_id) FROM scheduler_lock_t"
        " WHERE lock_id %% 65536 = 1 AND lock_id < %s"
        " AND last_heartbeat > clock_timestamp() - interval '3 s'",
        [1 + buckets * LEASE_STRIDE],
    )
    assert rows is not None
    held, holders = rows[0]
    return held == buckets and holders == instances


def one_run(schedules: int, buckets: int, instances: int, batch_size: int) -> float:
    sql(
        "TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t,"
        " scheduler_instance_t"
    )
    processes = [start(f"bench-{i}", buckets, batch_size) for i in range(instances)]
    try:
        wait(lambda: split(buckets, instances), 60, "the buckets to split")
        (due,) = sql("SELECT clock_timestamp() + interval '4 s'")[0]  # type: ignore[index]
        for offset in range(0, schedules, 25_000):
            size = min(25_000, schedules - offset)
            sql(
                """
                INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                    frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic,
                    event_type, event_data)
                SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000',
                       'bench-' || (i + %s), 'HOURS', 1, %s, %s, %s, 'bench', 'bench.tick',
                       jsonb_build_object('n', i)
                FROM generate_series(1, %s) AS i
                """,
                [offset, due, due, due, size],
            )
        sql("ANALYZE schedule_t")
        (late,) = sql("SELECT clock_timestamp() > %s", [due])[0]  # type: ignore[index]
        if late:
            raise SystemExit("inserting took longer than the head start: use fewer schedules")
        wait(
            lambda: sql("SELECT count(*) FROM event_store_t")[0][0] >= schedules,  # type: ignore[index]
            600,
            "every fire",
        )
        (span, dups) = sql(  # type: ignore[index]
            "SELECT extract(epoch FROM max(event_ts) - %s),"
            " (SELECT count(*) FROM (SELECT 1 FROM event_store_t GROUP BY aggregate_id,"
            "  scheduled_ts HAVING count(*) > 1) d) FROM event_store_t",
            [due],
        )[0]
        assert dups == 0, "duplicate fires"
        return schedules / float(span)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--buckets", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--instances", type=int, nargs="*", default=[1, 2, 3])
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    configs = [(1, 1)] + [(options.buckets, n) for n in options.instances]
    medians: dict[tuple[int, int], float] = {}
    for buckets, instances in configs:
        rates = []
        for run in range(options.runs):
            rate = one_run(options.schedules, buckets, instances, options.batch_size)
            rates.append(rate)
            print(f"  buckets {buckets}, {instances} instance(s), run {run + 1}: {rate:,.0f}/s")
        median = medians[(buckets, instances)] = statistics.median(rates)
        print(
            f"buckets {buckets}, {instances} instance(s): median {median:,.0f}"
            f" fires/s (min {min(rates):,.0f}, max {max(rates):,.0f}) over {options.runs} runs",
            flush=True,
        )
    one = medians.get((options.buckets, 1))
    if one:
        for (buckets, instances), rate in medians.items():
            print(f"{instances} instance(s), {buckets} bucket(s): {rate / one:.2f}x one instance")


if __name__ == "__main__":
    main()
