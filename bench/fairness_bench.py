"""A backlog and on-time work: does one tenant's backlog hold up another's fires?

    .venv/bin/python bench/fairness_bench.py --backlog 100000 --runs 5
    .venv/bin/python bench/fairness_bench.py --backlog 1000000 --runs 2
    .venv/bin/python bench/fairness_bench.py --backlog 100000 --instances 3 --buckets 16
    .venv/bin/python bench/fairness_bench.py --backlog 1000000 --due-ago 60 --start-behind 5
    # paired rounds against another checkout (the code before the fair claim):
    git worktree add --detach ../fair-before 84225f5
    BENCH_DATABASE=dsched_fair .venv/bin/python bench/fairness_bench.py \\
        --backlog 100000 --runs 5 --before ../fair-before

Tenant B has ``--probes`` per-second schedules; ``--instances`` real ``run_scheduler``
processes (``DSCHED_BUCKETS = --buckets``, through ``bench/bucket_settings.py``) start and
the bench waits until they hold every bucket between them (one leader when ``--buckets``
is 1). Then tenant A's ``--backlog`` hourly schedules become due all at once, due
``--due-ago`` seconds before (one transaction inserts them: a midnight of reminders, a
catch-up after an outage), and the instances drain them while B's keep coming due.

``--start-behind SECONDS``: after an outage (issue 40). A's backlog and B's schedules, their
next slot that many seconds before they are written, are written before the instances start
(then vacuumed and analysed), so the scheduler finds both tenants behind, A the longer
(``--due-ago`` must be larger). B's lag and missed slots are counted as in the default mode,
between A's first and last fire. With several ``--instances`` the first to hold the lease
starts the drain before the others join.

Per run it prints B's fire lag while A's backlog drains (the fire statement's database time
minus the slot, of B's slots between A's first and last fire: median, p99, max), B's slots
missed in that time (a slot of a B schedule with no fire: ``COALESCE`` merged it into a
later one), and the drain's rate (A's fires over the time between its first and last fire,
database clock), with the load average, and the same as a ``RESULT {json}`` line. Medians
over the runs. Asserts nothing.

``--before CHECKOUT``: paired rounds. Each round runs once with this checkout's code and
once with CHECKOUT's (its ``django_dsched`` and its ``bench/bucket_settings.py``; the order
alternates from round to round), each side on its own database of the same server (the
schema may differ: each is migrated by its own code), and prints the drain's ratio per
round (this checkout / CHECKOUT) and its median. CHECKOUT's processes run with
``DSCHED_OUTBOX_PAYLOAD_ONCE=True`` (a setting of versions that had it; ignored by later
ones), so both sides write the same rows per fire.

The database is ``$BENCH_DATABASE`` (default ``dsched_fairness_bench``), and
``<that>_before`` for CHECKOUT, on the server of ``DATABASE_URL`` (created if missing), or
on the embedded PostgreSQL when it is not set. This process talks to the databases through
psycopg only; every ``django_dsched`` import happens in the subprocesses of a side, each
with ``PYTHONPATH`` set to that side's checkout (the path each side imports is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent

TENANT_A = "00000000-0000-0000-0000-00000000000a"
TENANT_B = "00000000-0000-0000-0000-00000000000b"
LEASE_STRIDE = 1 << 16  # lock_id = DSCHED_LEASE_ID (1) + bucket * 65536
CHUNK = 100_000


@dataclass
class Side:
    name: str  # "now" (this checkout) or "before"
    checkout: Path
    url: str

    def env(self, buckets: int) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.url,
            "DSCHED_BUCKETS": str(buckets),
            "DSCHED_OUTBOX_PAYLOAD_ONCE": "True",
            "DEBUG": "False",
            "PYTHONPATH": f"{self.checkout}{os.pathsep}{self.checkout / 'bench'}",
        }

    def django(self, buckets: int, *argv: str, log: Path | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "django", *argv, "--settings=bucket_settings"],
            cwd=self.checkout / "bench",
            env=self.env(buckets),
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb") if log else subprocess.DEVNULL,
        )

    def prepare(self) -> None:
        """Migrate the side's database with its own code; say which code it imports."""
        migrate = self.django(1, "migrate", "-v", "0", log=Path(f"/tmp/fairness-{self.name}.log"))
        if migrate.wait(600):
            raise SystemExit(f"migrate failed: see /tmp/fairness-{self.name}.log")
        where = subprocess.run(
            [sys.executable, "-c", "import django_dsched; print(django_dsched.__file__)"],
            env=self.env(1),
            cwd="/",
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"{self.name}: {where} on {urlsplit(self.url).path[1:]}", flush=True)


def database_url(database: str) -> str:
    """``database`` on the server of DATABASE_URL (created if missing), else embedded."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.path.insert(0, str(ROOT))
        from example_project.embedded_db import database_url as embedded

        return embedded(database=database)
    server = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def sql(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[tuple[Any, ...]]:
    cursor = conn.execute(query, params)
    return cursor.fetchall() if cursor.description else []


def insert_probes(conn: psycopg.Connection[Any], probes: int, behind: float = 0.0) -> None:
    """B's per-second schedules, their next slot ``behind`` seconds ago (rounded down to a
    second)."""
    sql(
        conn,
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data)
        SELECT gen_random_uuid(), %s, 'b-' || i, 'SECONDS', 1, d, d, d, 'b', 'b.tick', '{}'
        FROM (SELECT date_trunc('second', now() - make_interval(secs => %s)) AS d) t,
             generate_series(1, %s) AS i
        """,
        [TENANT_B, behind, probes],
    )


def insert_backlog(conn: psycopg.Connection[Any], backlog: int, due_ago: float) -> float:
    """A's backlog, committed at once, every row due ``due_ago`` s before the insert began;
    returns the seconds it took."""
    started = time.monotonic()
    with conn.transaction():
        for offset in range(0, backlog, CHUNK):
            sql(
                conn,
                """
                INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
                    frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic,
                    event_type, event_data)
                SELECT gen_random_uuid(), %s, 'a-' || i, 'HOURS', 1, d, d, d, 'a', 'a.tick',
                       jsonb_build_object('n', i)
                FROM (SELECT now() - make_interval(secs => %s) AS d) t,
                     generate_series(%s + 1, %s + %s) AS i
                """,
                [TENANT_A, due_ago, offset, offset, min(CHUNK, backlog - offset)],
            )
    return time.monotonic() - started


def split(conn: psycopg.Connection[Any], buckets: int, instances: int) -> bool:
    """Every bucket (the lease when ``buckets`` is 1) is held, by ``instances`` instances."""
    ((held, holders),) = sql(
        conn,
        "SELECT count(*), count(DISTINCT instance_id) FROM scheduler_lock_t"
        " WHERE lock_id %% 65536 = 1 AND lock_id < %s"
        " AND last_heartbeat > clock_timestamp() - interval '3 s'",
        [1 + buckets * LEASE_STRIDE],
    )
    return bool(held == buckets and holders == instances)


def drained(conn: psycopg.Connection[Any]) -> bool:
    """No row of A is still due (a fired row of A is due an hour later): one index probe,
    not a count of A's events every half second."""
    ((due,),) = sql(
        conn,
        "SELECT EXISTS (SELECT FROM schedule_t WHERE active AND host_id = %s"
        " AND next_run_ts <= statement_timestamp() - interval '0.5 s')",
        [TENANT_A],
    )
    return not due


def wait(predicate: Any, timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def one_run(side: Side, options: argparse.Namespace) -> dict[str, float]:
    backlog, instances, buckets = options.backlog, options.instances, options.buckets
    with psycopg.connect(side.url, autocommit=True) as conn:
        sql(
            conn,
            "TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t,"
            " scheduler_instance_t",
        )
        sql(conn, "CHECKPOINT")  # the previous run's writes are not this one's to flush
        behind = options.start_behind
        inserted = 0.0
        if behind is not None:  # after an outage: both tenants behind before any instance
            inserted = insert_backlog(conn, backlog, options.due_ago)
            insert_probes(conn, options.probes, behind)
        else:
            insert_probes(conn, options.probes)
        sql(conn, "VACUUM ANALYZE schedule_t")
        processes = [
            side.django(
                buckets,
                "run_scheduler",
                f"--instance-id=bench-{i}",
                f"--batch-size={options.batch_size}",
                "-v",
                "0",
                log=Path(f"/tmp/fairness-{side.name}-{i}.log"),
            )
            for i in range(instances)
        ]
        try:
            wait(lambda: split(conn, buckets, instances), 120, "the buckets to split")
            if behind is None:
                inserted = insert_backlog(conn, backlog, options.due_ago)
                sql(conn, "ANALYZE schedule_t")
            wait(lambda: drained(conn), 3600, "the backlog to drain", every=0.5)
            time.sleep(2)  # B's fires just after the drain count as during it
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(60)
        load = os.getloadavg()[0]
        ((first, last, fired),) = sql(
            conn,
            "SELECT min(event_ts), max(event_ts), count(*) FROM event_store_t"
            " WHERE host_id = %s AND scheduled_ts IS NOT NULL",
            [TENANT_A],
        )
        lags = sorted(
            1000 * float(row[0])
            for row in sql(
                conn,
                # B's slots that came due while the backlog drained.
                "SELECT extract(epoch FROM event_ts - scheduled_ts) FROM event_store_t"
                " WHERE host_id = %s AND scheduled_ts BETWEEN %s AND %s",
                [TENANT_B, first, last],
            )
        )
        ((slots, missed),) = sql(
            # Every whole second from A's first fire to its last, for each B schedule.
            conn,
            """
            SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (
                       SELECT FROM event_store_t e
                       WHERE e.aggregate_id = s.schedule_id AND e.scheduled_ts = slot))
            FROM schedule_t s
            CROSS JOIN generate_series(date_trunc('second', %s::timestamptz) + interval '1 s',
                                       date_trunc('second', %s::timestamptz), '1 s') slot
            WHERE s.host_id = %s
            """,
            [first, last, TENANT_B],
        )
        ((duplicates,),) = sql(
            conn,
            "SELECT count(*) FROM (SELECT FROM event_store_t WHERE scheduled_ts IS NOT NULL"
            " GROUP BY aggregate_id, scheduled_ts HAVING count(*) > 1) d",
        )
    if fired != backlog or duplicates:
        raise SystemExit(f"{side.name}: {fired} of A's {backlog} fired, {duplicates} twice")
    seconds = max((last - first).total_seconds(), 1e-6)
    nan = float("nan")
    return {
        "drain_per_s": backlog / seconds,
        "drain_s": seconds,
        "b_lag_p50_ms": statistics.median(lags) if lags else nan,
        "b_lag_p99_ms": lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else nan,
        "b_lag_max_ms": lags[-1] if lags else nan,
        "b_fires": float(len(lags)),
        "b_slots": float(slots),
        "b_missed": float(missed),
        "insert_s": inserted,
        "load": load,
    }


def show(side: Side, run: int, result: dict[str, float]) -> None:
    print(
        f"  run {run + 1} {side.name}: A {result['drain_per_s']:,.0f} fires/s "
        f"({result['drain_s']:.1f} s); B lag p50 {result['b_lag_p50_ms']:.0f} ms, "
        f"p99 {result['b_lag_p99_ms']:.0f} ms, max {result['b_lag_max_ms']:.0f} ms, "
        f"{result['b_missed']:.0f} of {result['b_slots']:.0f} slots missed; "
        f"load {result['load']:.1f}",
        flush=True,
    )
    print("RESULT " + json.dumps({"side": side.name, "run": run + 1, **result}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="A's due schedules")
    parser.add_argument("--probes", type=int, default=10, help="B's per-second schedules")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instances", type=int, default=1, help="run_scheduler processes")
    parser.add_argument("--buckets", type=int, default=1, help="DSCHED_BUCKETS")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--due-ago", type=float, default=1.0, help="A's rows due s before")
    parser.add_argument("--before", type=Path, help="another checkout: paired rounds")
    parser.add_argument(
        "--start-behind",
        type=float,
        metavar="SECONDS",
        help="after an outage: A's backlog and B's schedules (this far behind) are written "
        "before the instances start",
    )
    options = parser.parse_args()
    if options.start_behind is not None and options.start_behind >= options.due_ago:
        parser.error("--start-behind must be less than --due-ago (A is the one further behind)")
    database = os.environ.get("BENCH_DATABASE", "dsched_fairness_bench")
    sides = [Side("now", ROOT, database_url(database))]
    if options.before:
        sides.append(Side("before", options.before.resolve(), database_url(f"{database}_before")))
    for side in sides:
        side.prepare()
    behind = options.start_behind
    print(
        f"A {options.backlog:,} due {options.due_ago:g} s before, B {options.probes} every "
        f"second{'' if behind is None else f' ({behind:g} s behind when written)'}, "
        f"{options.instances} instance(s), {options.buckets} bucket(s), batch "
        f"{options.batch_size}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, list[dict[str, float]]] = {side.name: [] for side in sides}
    for run in range(options.runs):
        for side in sides if run % 2 else sides[::-1]:
            result = one_run(side, options)
            results[side.name].append(result)
            show(side, run, result)
    for name, rows in results.items():
        print(f"{name}: medians of {len(rows)}")
        for key in rows[0]:
            values = [row[key] for row in rows]
            shown = ", ".join(f"{v:,.1f}" for v in values)
            print(f"  {key:<13} median {statistics.median(values):12,.1f}   runs: {shown}")
    if options.before:
        ratios = [
            now["drain_per_s"] / before["drain_per_s"]
            for now, before in zip(results["now"], results["before"], strict=True)
        ]
        print(
            f"drain now / before per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
