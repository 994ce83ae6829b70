"""The admin's lists read a bounded part of the history tables, however big they grow.

With tens of thousands of events and outbox messages (enough that the planner prefers
indexes), every query of every list page, filtered or not, is run with EXPLAIN ANALYZE and
the rows its plan reads from ``event_store_t`` and ``outbox_message_t`` are added up: a page
may read a few thousand of them, never the whole table. The history spans three weeks of day
partitions (and today's and the next days'), so every list reads across some thirty of them.
bench/admin_bench.py measures the same pages with a million rows (docs/performance.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dsched.admin.filters import CHOICES_LIMIT, index_distinct
from django_dsched.history import event_ids, partitions
from django_dsched.models import Schedule
from tests.admin.test_queries import MAX_QUERIES
from tests.helpers import sql

pytestmark = pytest.mark.django_db

BIG = ("event_store_t", "outbox_message_t")
EVENTS = 30_000
SCHEDULES = 30
# The most rows (and index entries) of a history table one query may read: a quarter of it.
MAX_ROWS_READ = EVENTS // 4

SCHEDULES_SQL = """
INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit, frequency_time,
    start_ts, next_run_ts, next_slot_ts, event_topic, event_type, event_data)
SELECT gen_random_uuid(), ('00000000-0000-0000-0000-00000000000' || (i %% 3))::uuid,
       'big-' || i, 'MINUTES', 1, now(), now() + interval '1 day', now() + interval '1 day',
       'topic-' || (i %% 3), 'type-' || (i %% 5), '{}'::jsonb
FROM generate_series(1, %(schedules)s) AS i
"""

# Fires of every schedule, with their outbox messages: 2 % pending, 0.1 % dead letters (in
# the middle of the history: the oldest day is only the part of a day the history reaches,
# small enough at some times of day for the planner to read it whole). The
# slots go back a minute a fire (three weeks), each fire's id the fire path's: in the day
# partitions of the slots (the fixture makes them), as a cluster running for weeks has them.
HISTORY_SQL = f"""
WITH s AS (
    SELECT schedule_id, host_id, schedule_name, event_topic, event_type,
           (row_number() OVER (ORDER BY schedule_name) - 1)::int AS k
    FROM schedule_t
),
f AS (
    SELECT s.*, g, date_trunc('second', now()) - (%(events)s - g) * interval '1 minute' AS slot
    FROM generate_series(0, %(events)s - 1) AS g JOIN s ON s.k = g %% %(schedules)s
),
e AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts,
                               leader_epoch)
    SELECT {event_ids.sql("f.schedule_id", "(extract(epoch FROM f.slot) * 1000000)::bigint")},
           f.host_id, f.schedule_id, 'Schedule', g / %(schedules)s + 2,
           f.event_type, now() - (%(events)s - g) * interval '1 s',
           jsonb_build_object('topic', f.event_topic),
           jsonb_build_object('schedule_name', f.schedule_name, 'trigger', 'schedule'),
           f.slot, 1
    FROM f
    RETURNING *
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                              event_type, event_ts, topic, status, priority, attempts,
                              delivered_ts, last_error)
SELECT e.id, e.host_id, e.aggregate_id, e.aggregate_type, e.aggregate_version, e.event_type,
       e.event_ts, e.payload->>'topic',
       b.status, 0, 1, CASE b.status WHEN 'DELIVERED' THEN e.event_ts END, ''
FROM e CROSS JOIN LATERAL (
    SELECT CASE WHEN e.aggregate_version %% 1000 = 500 THEN 'DELIVERY_FAILED'
                WHEN e.aggregate_version %% 100 < 2 THEN 'PENDING' ELSE 'DELIVERED' END
) AS b(status)
"""

PAGES = [
    "/admin/dsched/schedule/",
    "/admin/dsched/schedule/?event_topic=topic-1",
    "/admin/dsched/schedule/?event_type=type-2",
    "/admin/dsched/schedule/?host_id=00000000-0000-0000-0000-000000000002",
    "/admin/dsched/event/",
    "/admin/dsched/event/?kind=fire",
    "/admin/dsched/outboxmessage/",
    "/admin/dsched/outboxmessage/?topic=topic-1",
    "/admin/dsched/outboxmessage/?status__exact=DELIVERY_FAILED",
    "/admin/dsched/outboxmessage/?status__exact=PENDING",
]


@pytest.fixture(scope="module")
def history(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Loaded once for the module (committed), removed at its end."""
    with django_db_blocker.unblock():
        today = sql("SELECT (now() AT TIME ZONE 'UTC')::date")[0][0]
        past = [today - timedelta(days=n) for n in range(1, EVENTS // 1440 + 2)]
        for day in past:
            partitions.make_day(day)
        sql(SCHEDULES_SQL, {"schedules": SCHEDULES})
        sql(HISTORY_SQL, {"schedules": SCHEDULES, "events": EVENTS})
        for table in ("schedule_t", *BIG):
            sql(f"ANALYZE {table}")
    yield
    with django_db_blocker.unblock():
        # Empty again, and with no statistics, as the other tests' plans expect (TRUNCATE
        # resets the row estimates; the column statistics are a superuser's to remove).
        sql("TRUNCATE schedule_t, event_store_t, outbox_message_t")
        for day in past:
            sql(f"DROP TABLE {', '.join(partitions.partition(t, day) for t in BIG)}")
        if sql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0][0]:
            sql(
                "DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])",
                [["schedule_t", *BIG]],
            )


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def rows_read(query: str) -> dict[str, int]:
    """Rows (heap tuples and index entries) the plan reads from each history table."""
    indexes = dict(
        sql(
            "SELECT indexname, tablename FROM pg_indexes"
            " WHERE tablename LIKE 'event_store_t%%' OR tablename LIKE 'outbox_message_t%%'"
        )
    )
    (plan,) = sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}")[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    read = dict.fromkeys(BIG, 0)

    def walk(node: dict[str, Any]) -> None:
        table = node.get("Relation Name") or indexes.get(node.get("Index Name", ""))
        # A day's partition (or the default one) counts for its table.
        table = next((big for big in BIG if (table or "").startswith(big)), table)
        if table in read:
            rows = (
                node.get("Actual Rows", 0)
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
            read[table] += int(rows * node.get("Actual Loops", 1))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return read


@pytest.mark.parametrize("url", PAGES)
def test_a_list_page_reads_a_bounded_part_of_the_history(admin_client, history, url):
    admin_client.get(url)  # warm the per-process caches
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(url)
    assert response.status_code == 200
    assert len(captured) <= MAX_QUERIES
    selects = [q for q in captured.captured_queries if q["sql"].lstrip().startswith("SELECT")]
    assert selects
    for query in selects:  # as executed, parameters in place
        read = rows_read(query["sql"])
        assert max(read.values()) <= MAX_ROWS_READ, (query["sql"], read)


def test_the_filters_list_every_value_up_to_the_limit_without_reading_history(
    admin_client, history
):
    response = admin_client.get("/admin/dsched/outboxmessage/")
    for topic in ("topic-0", "topic-1", "topic-2"):
        assert f"?topic={topic}" in response.content.decode()
    response = admin_client.get("/admin/dsched/schedule/")
    page = response.content.decode()
    for value in ("event_topic=topic-2", "event_type=type-4", "host_id=00000000-0000-0000"):
        assert value in page


def test_a_value_no_schedule_uses_any_more_can_still_be_filtered_on(admin_client, history):
    sql("UPDATE outbox_message_t SET topic = 'retired' WHERE aggregate_version = 10")
    response = admin_client.get("/admin/dsched/outboxmessage/?topic=retired")
    assert response.status_code == 200
    assert response.context["cl"].result_count == SCHEDULES
    assert "?topic=retired" in response.content.decode()  # listed, since it is selected


def test_the_filters_show_at_most_the_limit_and_say_there_are_more(admin_client, db):
    many = SCHEDULES_SQL.replace("'topic-' || (i %% 3)", "'many-' || i")
    sql(many.replace("'big-'", "'many-'"), {"schedules": 60})
    response = admin_client.get("/admin/dsched/schedule/")
    page = response.content.decode()
    listed = sum(
        f"event_topic=many-{i}&" in page or f'event_topic=many-{i}"' in page for i in range(1, 61)
    )
    assert listed == CHOICES_LIMIT
    assert "more: use the search box" in page


def test_index_distinct_is_a_loose_index_scan(history):
    hosts = index_distinct(Schedule, "host_id", 10)
    assert [str(h) for h in hosts] == [f"00000000-0000-0000-0000-00000000000{i}" for i in range(3)]
    assert index_distinct(Schedule, "host_id", 2) == hosts[:2]


def test_the_schedule_filters_read_a_bounded_number_of_rows(admin_client, history, monkeypatch):
    from django_dsched.admin import filters

    monkeypatch.setattr(filters, "SCAN_LIMIT", 10)  # fewer rows than the 30 schedules
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get("/admin/dsched/schedule/").content.decode()
    assert "more: use the search box" in page  # the lists may be incomplete: said so
    scans = [q["sql"] for q in captured.captured_queries if "scanned" in q["sql"]]
    # The topic and event type filters: one read of the same 10 rows.
    assert len(scans) == 1 and all("LIMIT 10)" in q for q in scans)


# Lists in id order (newest first): the primary key, or a partial index on the ids of the
# status filtered on, serves the order, so a page reads its rows and a few entries per day
# partition (a dropped index would make it read whole days).
ORDERED_PAGES = [
    "/admin/dsched/event/",
    "/admin/dsched/outboxmessage/",
    "/admin/dsched/outboxmessage/?status__exact=PENDING",
    "/admin/dsched/outboxmessage/?status__exact=DELIVERY_FAILED",
]


@pytest.mark.parametrize("url", ORDERED_PAGES)
def test_a_list_in_id_order_reads_o_of_page(admin_client, history, url):
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(url)
    assert response.status_code == 200
    page = response.context["cl"].list_per_page
    listed = [
        q["sql"]
        for q in captured.captured_queries
        if 'ORDER BY "event_store_t"."id" DESC' in q["sql"]
        or 'ORDER BY "outbox_message_t"."id" DESC' in q["sql"]
    ]
    assert listed
    days = sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_message_t'::regclass")
    for query in listed:
        read = rows_read(query)
        if max(read.values()) > 2 * page + 2 * days[0][0]:
            plan = "\n".join(row[0] for row in sql(f"EXPLAIN (ANALYZE) {query}"))
            pytest.fail(f"{read} rows read by\n{query}\n{plan}")
