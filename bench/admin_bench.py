"""Benchmark of the admin's history pages with a big history: queries and database time.

    .venv/bin/python bench/admin_bench.py                        # 1,000,000 events, 5 runs
    .venv/bin/python bench/admin_bench.py --events 1000000 --schedules 1000 --runs 5
    .venv/bin/python bench/admin_bench.py --schedules 100000 --reload   # a bigger schedule_t

Loads (once; ``--reload`` to redo) ``--schedules`` schedules over 10 topics, 20 event types
and 3 hosts, and ``--events`` fires spread over them, each with its outbox message (98 %
delivered, 1 % pending, 1 % dead letters), into a ``dsched_admin_bench`` database (on the
embedded PostgreSQL unless DATABASE_URL is set). Then requests each change list (plain and
filtered) through Django's test client as a superuser and prints, per page, the number of
queries, the database time (the sum of the queries' times as Django measures them around
each execute: medians of ``--runs`` runs after a warm-up), the slowest query's time, and the
most rows (and index entries) one query reads from the history tables (EXPLAIN ANALYZE).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_admin_bench")

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

BIG = ["event_store_t", "outbox_message_t"]

PAGES = [
    ("schedules", "/admin/dsched/schedule/"),
    ("schedules, topic filter", "/admin/dsched/schedule/?event_topic=topic-3"),
    ("schedules, host filter", "/admin/dsched/schedule/?host_id=00000000-0000-0000-0000-000000000002"),  # noqa: E501
    ("events", "/admin/dsched/event/"),
    ("events, fires", "/admin/dsched/event/?kind=fire"),
    ("outbox", "/admin/dsched/outboxmessage/"),
    ("outbox, topic filter", "/admin/dsched/outboxmessage/?topic=topic-3"),
    ("outbox, dead letters", "/admin/dsched/outboxmessage/?status__exact=DELIVERY_FAILED"),
]  # fmt: skip

LOAD_SCHEDULES = """
INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit, frequency_time,
    start_ts, next_run_ts, next_slot_ts, event_topic, event_type, event_data)
SELECT gen_random_uuid(), ('00000000-0000-0000-0000-00000000000' || (i %% 3))::uuid,
       'bench-' || i, 'MINUTES', 1, now(), now() + interval '1 day', now() + interval '1 day',
       'topic-' || (i %% 10), 'type-' || (i %% 20) || '.run', jsonb_build_object('n', i)
FROM generate_series(1, %(schedules)s) AS i
"""

# Fires of every schedule, one slot a minute back in time, with their outbox messages.
LOAD_EVENTS = """
WITH s AS (
    SELECT schedule_id, host_id, schedule_name, event_topic, event_type,
           (row_number() OVER (ORDER BY schedule_name) - 1)::int AS k
    FROM schedule_t
),
e AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts,
                               leader_epoch)
    SELECT gen_random_uuid(), s.host_id, s.schedule_id, 'Schedule', g / %(schedules)s + 2,
           s.event_type, now() - (%(events)s - g) * interval '10 ms',
           jsonb_build_object('n', g),
           jsonb_build_object('topic', s.event_topic, 'schedule_name', s.schedule_name,
                              'priority', 0, 'trigger', 'schedule', 'instance_id', 'bench',
                              'timeline', 1),
           now() - (%(events)s / %(schedules)s - g / %(schedules)s) * interval '1 minute', 1
    FROM generate_series(%(first)s, %(last)s) AS g JOIN s ON s.k = g %% %(schedules)s
    RETURNING *
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                              event_type, event_ts, topic, status, priority, attempts,
                              delivered_ts, last_error)
SELECT e.id, e.host_id, e.aggregate_id, e.aggregate_type, e.aggregate_version, e.event_type,
       e.event_ts, e.payload->>'topic',
       CASE b.bucket WHEN 0 THEN 'PENDING' WHEN 1 THEN 'DELIVERY_FAILED' ELSE 'DELIVERED' END,
       0, CASE b.bucket WHEN 1 THEN 10 ELSE 1 END,
       CASE WHEN b.bucket > 1 THEN e.event_ts + interval '20 ms' END,
       CASE b.bucket WHEN 1 THEN 'ConnectionError: refused' ELSE '' END
FROM e CROSS JOIN LATERAL (SELECT abs(hashtext(e.id::text)) %% 100 AS bucket) AS b
"""


def sql(query: str, params: object = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def load(schedules: int, events: int, reload: bool) -> None:
    call_command("migrate", verbosity=0)
    have = sql("SELECT (SELECT count(*) FROM schedule_t), (SELECT count(*) FROM event_store_t)")
    if not reload and have[0] == (schedules, events):
        return
    print(f"loading {schedules:,} schedules and {events:,} events ...", flush=True)
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t")
    sql(LOAD_SCHEDULES, {"schedules": schedules})
    chunk = 200_000
    for first in range(0, events, chunk):
        last = min(events, first + chunk) - 1
        sql(LOAD_EVENTS, {"schedules": schedules, "events": events, "first": first, "last": last})
    sql("VACUUM ANALYZE schedule_t")
    sql("VACUUM ANALYZE event_store_t")
    sql("VACUUM ANALYZE outbox_message_t")


def rows_read(query: str) -> int:
    """Rows and index entries the query's plan reads from the history tables (EXPLAIN ANALYZE)."""
    if not query.lstrip().upper().startswith(("SELECT", "WITH")):
        return 0
    indexes = dict(
        sql("SELECT indexname, tablename FROM pg_indexes WHERE tablename = ANY(%s)", [BIG])
    )
    (plan,) = sql("EXPLAIN (ANALYZE, FORMAT JSON) " + query)[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node: dict) -> int:
        read = 0
        if (node.get("Relation Name") or indexes.get(node.get("Index Name", ""))) in BIG:
            rows = (
                node.get("Actual Rows", 0)
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
            read = int(rows * node.get("Actual Loops", 1))
        return read + sum(walk(child) for child in node.get("Plans", []))

    return walk(plan[0]["Plan"])


def measure(client: Client, url: str, runs: int) -> tuple[int, float, float, str, int]:
    response = client.get(url)  # warm-up (caches, buffers)
    assert response.status_code == 200, (url, response.status_code)
    totals, slowest = [], []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200
        times = [float(q["time"]) * 1000 for q in captured.captured_queries]
        totals.append(sum(times))
        slowest.append(max(times))
        queries = captured.captured_queries
    worst = max(queries, key=lambda q: float(q["time"]))["sql"]
    most_read = max(rows_read(q["sql"]) for q in queries)
    return len(queries), statistics.median(totals), statistics.median(slowest), worst, most_read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--show-sql", action="store_true", help="print each page's slowest query")
    options = parser.parse_args()
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    load(options.schedules, options.events, options.reload)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)
    version = sql("SHOW server_version")[0][0]
    print(
        f"{options.schedules:,} schedules, {options.events:,} events and outbox messages;"
        f" PostgreSQL {version}; medians of {options.runs} runs"
    )
    print(f"{'page':28} {'queries':>7} {'db ms':>8} {'slowest ms':>10} {'most rows read':>14}")
    for name, url in PAGES:
        count, total, slowest, worst, most_read = measure(client, url, options.runs)
        print(f"{name:28} {count:7d} {total:8.1f} {slowest:10.1f} {most_read:14,d}")
        if options.show_sql:
            print(f"    slowest: {worst[:300]}")


if __name__ == "__main__":
    main()
