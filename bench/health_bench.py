"""Benchmark of schedule health at scale: the counts the metrics export, the admin's list
with its health column (plain and filtered), and the REST list's health filter.

    .venv/bin/python bench/health_bench.py                      # 100,000 schedules, 5 runs
    .venv/bin/python bench/health_bench.py --schedules 100000 --unhealthy 1000 --runs 5
    .venv/bin/python bench/health_bench.py --reload             # load again
    .venv/bin/python bench/health_bench.py --breakdown          # and the list's statements

Loads (once; ``--reload`` to redo) ``--schedules`` hourly schedules over 10 topics into a
``dsched_health_bench`` database (on the embedded PostgreSQL unless DATABASE_URL is set),
each fired once with a delivered message; ``--unhealthy`` of them are unhealthy, split
between LATE (next run 10 minutes ago), PAUSED (a pause that ended: LATE too, and a plain
one), SET_ASIDE, FAILING (a health row past the tolerance) and STUCK (a run started two
hours ago), and as many recovered health rows (failures 0) again. Then times, medians of
``--runs`` after a warm-up:

- ``counts``: ``health.counts.read_counts`` (what a scrape reads), the statement's
  database time (EXPLAIN ANALYZE's execution time) and its wall time through Django;
- ``monitored``: ``read_monitored`` for ``DSCHED_HEALTH_MONITORED_MAX`` monitored schedules;
- the admin's schedule list (plain, and filtered on each health state, on "needs
  attention") through Django's test client: queries and database time;
- the REST list with ``health=UNHEALTHY``.

The target (issue 43): the health of 100,000 schedules in under 100 ms, the admin list with
its health column under the same bound. Prints figures; asserts nothing. The schedules'
next runs are one to two hours ahead at load: none turns late for an hour (then ``--reload``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_health_bench")

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from django_dsched.health import counts  # noqa: E402
from django_dsched.history import event_ids  # noqa: E402

LOAD = """
INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit, frequency_time,
    start_ts, next_run_ts, next_slot_ts, event_topic, event_type, event_data, last_fired_ts,
    fire_count, monitored)
SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000', 'health-' || i, 'HOURS', 1,
       now() - interval '1 hour', now() + interval '1 hour' + (i %% 3600) * interval '1 s',
       now() + interval '1 hour' + (i %% 3600) * interval '1 s',
       'topic-' || (i %% 10), 'health.tick', '{}'::jsonb, now() - (i %% 3600) * interval '1 s',
       1, i <= %(monitored)s
FROM generate_series(1, %(schedules)s) AS i
"""
# Each schedule's fire: the event's id from (schedule, slot), as the fire path makes it.
FIRES = f"""
WITH e AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts)
    SELECT {event_ids.sql("schedule_id", "(extract(epoch FROM slot) * 1000000)::bigint")},
           host_id, schedule_id, 'Schedule', 2, event_type, last_fired_ts,
           '{{}}'::jsonb, jsonb_build_object('topic', event_topic), slot
    FROM (SELECT *, date_trunc('milliseconds', last_fired_ts) AS slot FROM schedule_t) s
    RETURNING *
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status, delivered_ts, picked_ts, started_ts, completed_ts)
SELECT id, host_id, aggregate_id, 'Schedule', 2, event_type, event_ts, metadata->>'topic',
       'DELIVERED', event_ts + interval '20 ms', event_ts, event_ts, event_ts + interval '10 ms'
FROM e
"""
# Every fifth of the unhealthy ones in each state (by name order).
UNHEALTHY = """
WITH picked AS (
    SELECT schedule_id, row_number() OVER (ORDER BY schedule_name DESC) %% 6 AS kind
    FROM schedule_t ORDER BY schedule_name DESC LIMIT %(unhealthy)s
),
late AS (
    UPDATE schedule_t s SET next_run_ts = now() - interval '10 minutes'
    FROM picked p WHERE s.schedule_id = p.schedule_id AND p.kind = 0
),
paused AS (
    UPDATE schedule_t s SET state = 'PAUSED', active = false,
        paused_until = CASE WHEN p.schedule_id::text < '8' THEN now() - interval '5 minutes' END
    FROM picked p WHERE s.schedule_id = p.schedule_id AND p.kind = 1
),
aside AS (
    UPDATE schedule_t s SET state = 'SET_ASIDE', active = false, set_aside_ts = now(),
        set_aside_reason = 'bench'
    FROM picked p WHERE s.schedule_id = p.schedule_id AND p.kind = 2
),
failing AS (
    INSERT INTO schedule_health_t (schedule_id, failures, failing_since_ts, last_error)
    SELECT schedule_id, CASE WHEN kind = 3 THEN 3 ELSE 0 END, now(), 'ConnectError'
    FROM picked WHERE kind IN (3, 5)
)
UPDATE outbox_message_t o SET completed_ts = NULL, started_ts = now() - interval '2 hours'
FROM picked p WHERE o.aggregate_id = p.schedule_id AND p.kind = 4
"""

PAGES = [
    ("admin list", "/admin/dsched/schedule/"),
    ("admin list, needs attention", "/admin/dsched/schedule/?health=UNHEALTHY"),
    ("admin list, late", "/admin/dsched/schedule/?health=LATE"),
    ("admin list, failing", "/admin/dsched/schedule/?health=FAILING"),
    ("admin list, stuck", "/admin/dsched/schedule/?health=STUCK"),
    ("admin list, OK", "/admin/dsched/schedule/?health=OK"),
    ("REST list, unhealthy", "/api/dsched/schedules/?health=UNHEALTHY"),
]


def sql(query: str, params: object = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def load(schedules: int, unhealthy: int, monitored: int, reload: bool) -> None:
    call_command("migrate", verbosity=0)
    have = sql("SELECT count(*) FROM schedule_t")[0][0]
    if not reload and have == schedules:
        return
    print(f"loading {schedules:,} schedules ({unhealthy:,} unhealthy) ...", flush=True)
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, schedule_health_t")
    sql(LOAD, {"schedules": schedules, "monitored": monitored})
    sql(FIRES)
    sql(UNHEALTHY, {"unhealthy": unhealthy})
    for table in ("schedule_t", "event_store_t", "outbox_message_t", "schedule_health_t"):
        sql(f"VACUUM ANALYZE {table}")


def timed(function, runs: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def execution_ms(statement: str, params: object, runs: int) -> float:
    def once() -> float:
        (plan,) = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return float(plan[0]["Execution Time"])

    once()
    return statistics.median(once() for _ in range(runs))


def page(client: Client, url: str, runs: int) -> tuple[int, float, float]:
    assert client.get(url).status_code == 200, url
    totals, walls = [], []
    for _ in range(runs):
        start = time.perf_counter()
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        walls.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
        totals.append(sum(float(q["time"]) * 1000 for q in captured.captured_queries))
    return len(captured.captured_queries), statistics.median(totals), statistics.median(walls)


def breakdown(client: Client, url: str) -> None:
    """Where a page's time goes: each statement's time through Django and its EXPLAIN
    ANALYZE planning and execution times (what django-debug-toolbar would show), and the
    rest of the wall time (Python: the rows' columns, the template)."""
    client.get(url)
    start = time.perf_counter()
    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    wall = (time.perf_counter() - start) * 1000
    total = 0.0
    print(f"\n{url}: where the time goes")
    print(f"{'ms':>7} {'plan':>6} {'exec':>6}  statement")
    for query in captured.captured_queries:
        statement, spent = query["sql"], float(query["time"]) * 1000
        total += spent
        plan = execution = ""
        if statement.lstrip().startswith(("SELECT", "WITH")):
            (found,) = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement)[0]
            found = json.loads(found) if isinstance(found, str) else found
            plan = f"{found[0]['Planning Time']:6.1f}"
            execution = f"{found[0]['Execution Time']:6.1f}"
        print(f"{spent:7.1f} {plan:>6} {execution:>6}  {' '.join(statement.split())[:90]}")
    print(
        f"{total:7.1f} in {len(captured.captured_queries)} statements; {wall - total:.1f} ms more"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--unhealthy", type=int, default=1_000)
    parser.add_argument("--monitored", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument(
        "--breakdown", action="store_true", help="each statement of the admin list's page"
    )
    options = parser.parse_args()
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    load(options.schedules, options.unhealthy, options.monitored, options.reload)
    version = sql("SHOW server_version")[0][0]
    print(
        f"{options.schedules:,} schedules, {options.unhealthy:,} unhealthy,"
        f" {options.monitored} monitored; PostgreSQL {version}; medians of {options.runs} runs"
    )
    found: dict[str, int] = {}
    for state, _topic, n in counts.read_counts(counts.COUNT_LIMIT):
        found[state] = found.get(state, 0) + n
    print("counted:", ", ".join(f"{k} {v:,}" for k, v in sorted(found.items())))
    params = {"limit": counts.COUNT_LIMIT}
    print(f"{'what':32} {'queries':>7} {'db ms':>8} {'wall ms':>8}")
    db = execution_ms(counts.counts_sql(), params, options.runs)
    wall = timed(lambda: counts.read_counts(counts.COUNT_LIMIT), options.runs)
    print(f"{'counts (a scrape)':32} {1:7d} {db:8.1f} {wall:8.1f}")
    wall = timed(lambda: counts.read_monitored(options.monitored), options.runs)
    print(f"{'monitored series':32} {'':>7} {'':>8} {wall:8.1f}")
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)
    for name, url in PAGES:
        queries, total, wall = page(client, url, options.runs)
        print(f"{name:32} {queries:7d} {total:8.1f} {wall:8.1f}")
    if options.breakdown:
        breakdown(client, PAGES[0][1])


if __name__ == "__main__":
    main()
