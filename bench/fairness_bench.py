"""A backlog and on-time work: does one tenant's backlog hold up another's fires?

    .venv/bin/python bench/fairness_bench.py --backlog 100000 --runs 5

Tenant A has ``--backlog`` hourly schedules all due a minute ago (a midnight of reminders, a
catch-up after an outage); tenant B has ``--probes`` per-second schedules. One real
``run_scheduler`` drains A's backlog while B's schedules keep coming due. Per run it prints
B's fire lag while the backlog drains (the statement's database time minus the slot:
median, p99, max), B's slots missed (a gap in its fired slots), and the drain's rate (A's
fires per second, first to last). Medians over the runs. Asserts nothing.

Run it from two checkouts on the same database (``DATABASE_URL``) to compare two versions
of the claim: the drain's rate is the throughput cost of putting on-time work first.
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

os.environ["DEBUG"] = "False"
URL = configure("dsched_bench")

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

TENANT_A = "00000000-0000-0000-0000-00000000000a"
TENANT_B = "00000000-0000-0000-0000-00000000000b"


def sql(query: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def prepare(backlog: int, probes: int) -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")
    for offset in range(0, backlog, 100_000):
        size = min(100_000, backlog - offset)
        sql(
            """
            INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
                event_data)
            SELECT gen_random_uuid(), %s, 'a-' || i, 'HOURS', 1, now() - interval '1 minute',
                   now() - interval '1 minute', now() - interval '1 minute', 'a', 'a.tick',
                   jsonb_build_object('n', i)
            FROM generate_series(%s + 1, %s + %s) AS i
            """,
            [TENANT_A, offset, offset, size],
        )
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data)
        SELECT gen_random_uuid(), %s, 'b-' || i, 'SECONDS', 1,
               date_trunc('second', now()), date_trunc('second', now()),
               date_trunc('second', now()), 'b', 'b.tick', '{}'
        FROM generate_series(1, %s) AS i
        """,
        [TENANT_B, probes],
    )
    sql("VACUUM ANALYZE schedule_t")


def one_run(backlog: int, probes: int) -> dict[str, float]:
    prepare(backlog, probes)
    scheduler = subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), "run_scheduler",
         "--instance-id=bench", "-v", "0"],
        env={**os.environ, "DATABASE_URL": URL},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            (done,) = sql(
                "SELECT count(*) FROM event_store_t"
                " WHERE host_id = %s AND scheduled_ts IS NOT NULL",
                [TENANT_A],
            )[0]
            if done >= backlog:
                break
            time.sleep(0.5)
        time.sleep(2)  # B's fires just after the drain count as during it
    finally:
        scheduler.terminate()
        scheduler.wait(30)
    (first, last) = sql(
        "SELECT min(event_ts), max(event_ts) FROM event_store_t"
        " WHERE host_id = %s AND scheduled_ts IS NOT NULL",
        [TENANT_A],
    )[0]
    lags = [
        row[0]
        for row in sql(
            # B's slots that came due while the backlog drained.
            "SELECT extract(epoch FROM event_ts - scheduled_ts) FROM event_store_t"
            " WHERE host_id = %s AND scheduled_ts BETWEEN %s AND %s",
            [TENANT_B, first, last],
        )
    ]
    (missed,) = sql(
        """
        SELECT coalesce(sum(gap - 1), 0) FROM (
            SELECT round(extract(epoch FROM scheduled_ts - lag(scheduled_ts)
                         OVER (PARTITION BY aggregate_id ORDER BY scheduled_ts)))::int AS gap
            FROM event_store_t WHERE host_id = %s AND scheduled_ts IS NOT NULL) g
        WHERE gap > 1
        """,
        [TENANT_B],
    )[0]
    seconds = max((last - first).total_seconds(), 1e-6)
    lags.sort()
    return {
        "drain_per_s": backlog / seconds,
        "lag_median_ms": 1000 * float(statistics.median(lags)) if lags else float("nan"),
        "lag_p99_ms": 1000 * float(lags[int(0.99 * (len(lags) - 1))]) if lags else float("nan"),
        "lag_max_ms": 1000 * float(lags[-1]) if lags else float("nan"),
        "probe_fires": len(lags),
        "missed": float(missed),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    runs = [one_run(options.backlog, options.probes) for _ in range(options.runs)]
    for key in runs[0]:
        values = [run[key] for run in runs]
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"{key:<14} median {statistics.median(values):10.1f}   runs: {shown}")


if __name__ == "__main__":
    main()
