"""Health stays cheap however many schedules there are: its counts and a page of the list
with its health read indexes, and no more rows than they show or count.

``EXPLAIN (ANALYZE, FORMAT JSON)`` with 40,000 schedules (a few late, paused, set aside,
failing and stuck) and 40,000 delivered outbox messages: every scan of ``schedule_t``,
``outbox_message_t`` and ``schedule_health_t`` is an index scan, and none reads more than
the rows it counts or shows (bench/health_bench.py times 100,000).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_dsched.admin import filters
from django_dsched.enums import UNHEALTHY, DeliveryStatus, Health
from django_dsched.health import counts, judge
from django_dsched.models import Schedule
from tests.helpers import sql
from tests.metrics.test_gauges_plan import nodes
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

BIG = 40_000
TABLES = ("schedule_t", "outbox_message_t", "schedule_health_t")


def seed() -> None:
    """BIG hourly schedules: 5 late, 4 paused, 3 set aside, the rest on time and fired; 2
    failing, 2 stuck; BIG delivered messages, a few of them runs under way."""
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data, state, active, last_fired_ts, set_aside_ts)
        SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000', 'h-' || i, 'HOURS',
               1, now(),
               now() + CASE WHEN i <= 5 THEN interval '-10 minutes' ELSE interval '1 hour' END,
               now(), 't' || (i %% 7), 'h.tick', '{}'::jsonb,
               CASE WHEN i > %(big)s - 3 THEN 'SET_ASIDE'
                    WHEN i > %(big)s - 7 THEN 'PAUSED' ELSE 'ACTIVE' END,
               i <= %(big)s - 7, now() - interval '1 hour',
               CASE WHEN i > %(big)s - 3 THEN now() END
        FROM generate_series(1, %(big)s) AS i
        """,
        {"big": BIG},
    )
    make_messages(BIG, status=DeliveryStatus.DELIVERED, age=3600)
    # Failing: two health rows past the tolerance, and 2,000 that recovered (failures 0).
    sql(
        """
        INSERT INTO schedule_health_t (schedule_id, failures, failing_since_ts, last_error)
        SELECT schedule_id, CASE WHEN n <= 2 THEN 3 ELSE 0 END,
               CASE WHEN n <= 2 THEN now() END, 'down'
        FROM (SELECT schedule_id, row_number() OVER (ORDER BY schedule_name) AS n
              FROM schedule_t WHERE active AND next_run_ts > now()
              ORDER BY schedule_name LIMIT 2002) s
        """
    )
    # Stuck: two messages of on-time schedules started two hours ago, never finished; and
    # three runs under way, within their time.
    sql(
        """
        UPDATE outbox_message_t o SET aggregate_id = s.schedule_id, completed_ts = NULL,
               started_ts = now() - CASE WHEN s.n <= 2 THEN interval '2 hours'
                                         ELSE interval '1 minute' END
        FROM (SELECT schedule_id, row_number() OVER (ORDER BY schedule_name DESC) AS n
              FROM schedule_t WHERE active AND next_run_ts > now()
              ORDER BY schedule_name DESC LIMIT 5) s,
             (SELECT id, row_number() OVER (ORDER BY id) AS n FROM outbox_message_t
              ORDER BY id LIMIT 5) m
        WHERE o.id = m.id AND m.n = s.n
        """
    )
    for table in TABLES:
        sql(f"ANALYZE {table}")


def explain(statement: str, params: Any) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"]


def assert_index_scans_only(
    plan: dict[str, Any], most_rows: int, *, besides: str | None = None
) -> None:
    """Every scan of the tables (and of each day's outbox partition) is an index scan (or
    the heap visits of a bitmap index scan) reading at most ``most_rows`` rows; a day's
    partition may be scanned if it is empty (nothing read). ``besides``: the alias of a
    scan the statement's own order needs (not health's)."""
    scans = [
        n
        for n in nodes(plan)
        if str(n.get("Relation Name", "")).startswith(TABLES) and n.get("Alias") != besides
    ]
    assert scans
    for scan in scans:
        read = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan["Actual Loops"]
        kind = scan["Node Type"]
        if kind == "Seq Scan" and scan["Relation Name"] not in TABLES:
            assert read == 0, (scan["Relation Name"], read)  # an empty day
            continue
        assert "Index" in kind or kind == "Bitmap Heap Scan", (kind, scan.get("Relation Name"))
        assert read <= most_rows, (kind, scan.get("Index Name"), read)


def test_the_counts_and_a_page_of_the_list_read_indexes_only():
    seed()

    counted: dict[str, int] = {}
    for state, _topic, n in counts.read_counts(counts.COUNT_LIMIT):
        counted[state] = counted.get(state, 0) + n
    assert counted == {
        Health.LATE: 5,
        Health.PAUSED: 4,
        Health.SET_ASIDE: 3,
        Health.FAILING: 2,
        Health.STUCK: 2,
    }
    assert_index_scans_only(explain(counts.counts_sql(), {"limit": counts.COUNT_LIMIT}), 25)

    # A page of rows with their health: health is worked out for those rows alone.
    page = judge.with_health(Schedule.objects.order_by("next_run_ts"))[:100]
    rows = list(page)
    assert [getattr(r, judge.STATE) for r in rows[:5]] == [Health.LATE] * 5
    statement, params = page.query.sql_with_params()
    assert_index_scans_only(explain(statement, params), 150, besides="schedule_t")

    # The admin's list, plain, paged, filtered: every statement reads the rows it shows or
    # counts (the first page: a range of the due index; no sort of the table).
    admin_list_reads_what_it_shows()

    # A filtered list reads the candidates only.
    for states in ([Health.LATE], [Health.FAILING], [Health.STUCK], [Health.SET_ASIDE], UNHEALTHY):
        query = judge.filter_health(Schedule.objects.order_by("next_run_ts"), *states)[:100]
        statement, params = query.query.sql_with_params()
        assert_index_scans_only(explain(statement, params), 25)


def admin_list_reads_what_it_shows() -> None:
    """Each statement of the admin's schedule list (EXPLAIN ANALYZE of what it ran) reads at
    most the rows a page shows or counts: the exact count stops at its limit, the filters'
    values read their bounded scan (filters.SCAN_LIMIT), and nothing reads the table."""
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    url = reverse("admin:dsched_schedule_changelist")
    for query in ({}, {"p": 3}, {"health": "OK"}, {"health": "UNHEALTHY"}, {"health": "LATE"}):
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url, query)
        assert response.status_code == 200
        html = response.content.decode()
        if not query:  # the first page: the late ones first, with their health
            assert html.count('dsched-health-late"') == 5
        for statement in (q["sql"] for q in captured.captured_queries):
            if "schedule_t" not in statement or not statement.lstrip().startswith(
                ("SELECT", "WITH")
            ):
                continue
            # A page's 100 rows; the exact count stops at 1,001 (and reads the few
            # candidates of a filter that its state rules out); the filters' values.
            most = filters.SCAN_LIMIT if "scanned AS MATERIALIZED" in statement else 1_100
            for scan in nodes(explain(statement, None)):
                if not str(scan.get("Relation Name", "")).startswith(TABLES):
                    continue
                read = scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)
                read *= scan["Actual Loops"]
                assert read <= most, (query, scan["Node Type"], read, statement[:200])
