"""The relay's claim across a month of day partitions reads O(batch) rows.

100,000 messages waiting on a backoff or under another relay's claim, spread over 30 past
days' partitions (ids by the time they fired, as the fire path gives them), and a few
claimable ones today: ``EXPLAIN (ANALYZE, BUFFERS)`` of the claim and of the next-claimable
probe, asserting on the rows and buffers read (never on time). Each probe of the ready index
is a Merge Append of the partitions' own ready indexes: a row or two and a few buffers per
partition, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta

import pytest
from django.db import connection

from django_dsched.history.event_ids import change_sql
from django_dsched.history.partitions import EVENTS, OUTBOX, make_day, partition
from django_dsched.outbox.claims import CLAIM, NEXT_CLAIMABLE, pending_ids
from tests.helpers import sql
from tests.outbox.test_claims import (
    BATCH,
    assert_reads_o_of_batch,
    explain,
    nodes,
    params,
    rows_read,
)
from tests.outbox_helpers import waiting_over_days_sql

pytestmark = pytest.mark.django_db(transaction=True)

DAYS = 30
# 5,000 a day. The claim may read 2 * BATCH + 10 rows and 2,480 buffers, the next-claimable
# probe 10 rows and 530 buffers, each 2 more rows a partition (40 here: the month, today, the
# days made ahead, the default): 190 and 90 rows. A read that grows with the waiting rows
# reads 150,000 of them (over 700 times the claim's bound) or a day's 5,000 (26 times); a
# read of their heap (about 3,200 pages) is past either's buffers, and so is a walk of a
# ready index's leaves (about 750). 300,000 took 15 s to write for the same verdicts.
WAITING = 150_000

# In the order of their ids (their days, oldest first), as the fire path writes them: each
# partition's rows and index entries written together, not every row into another of the 30
# partitions than the row before (half the database's time for the same rows; the plans
# read the same rows and buffers).
WAITING_SQL = f"{waiting_over_days_sql(DAYS)} ORDER BY t.ts"
CLAIMABLE_SQL = f"""
INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, payload, metadata)
SELECT id, '00000000-0000-0000-0000-000000000000', id, 'Schedule', 1, 'report.build', ts,
       '{{}}'::jsonb, '{{}}'::jsonb
FROM (SELECT {change_sql("ts")} AS id, ts
      FROM (SELECT statement_timestamp() - interval '60 s' + n * interval '1 ms' AS ts
            FROM generate_series(1, %(count)s) AS n) g) x;
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status)
SELECT id, host_id, aggregate_id, 'Schedule', 1, event_type, event_ts, 'reports', 'PENDING'
FROM event_store_t WHERE event_ts > statement_timestamp() - interval '61 s'
"""


@pytest.fixture
def month() -> Iterator[list[date]]:
    today = sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]
    days = [today - timedelta(days=n) for n in range(1, DAYS + 2)]
    for day in days:
        make_day(day)
    yield days
    # The month's partitions dropped first, in one statement: the truncate then empties only
    # the partitions that stay.
    sql("DROP TABLE " + ", ".join(partition(t, day) for day in days for t in (OUTBOX, EVENTS)))
    sql("TRUNCATE outbox_message_t, event_store_t")


def test_a_claim_across_a_month_of_day_partitions_reads_o_of_batch(month):
    sql(WAITING_SQL, {"count": WAITING})
    sql(CLAIMABLE_SQL, {"count": 2 * BATCH})
    sql("ANALYZE outbox_message_t")
    in_days = sql("SELECT count(DISTINCT tableoid) FROM outbox_message_t WHERE status = 'PENDING'")[
        0
    ][0]
    assert in_days >= DAYS  # the waiting rows are spread over the month's partitions
    assert sql(f"SELECT count(*) FROM {OUTBOX}_default") == [(0,)]

    with connection.cursor() as cursor:
        ids = pending_ids(cursor)  # the range the relay names: the whole month here
    assert ids is not None
    for topics in (None, ["reports"]):
        plan = explain(NEXT_CLAIMABLE, params(topics=topics, **ids))
        assert_reads_o_of_batch(plan, f"next claimable {topics}", max_rows=10, max_buffers=50)
        plan = explain(CLAIM, params(topics=topics, **ids))
        assert plan["Plan"]["Actual Rows"] == BATCH
        assert_reads_o_of_batch(
            plan, f"claim {topics}", max_rows=2 * BATCH + 10, max_buffers=40 * BATCH
        )


# Events in the default partition (their days not made): many of today's whose ids carry a
# day far ahead (a slot beyond the days made), and a few of 60 days ago, expired.
DEFAULT_EVENTS_SQL = f"""
INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, payload, metadata)
SELECT {change_sql("t.slot")}, '00000000-0000-0000-0000-000000000000', gen_random_uuid(),
       'Schedule', 1, 'report.build', t.fired, '{{}}'::jsonb, '{{}}'::jsonb
FROM (SELECT CASE WHEN n <= %(expired)s THEN statement_timestamp() - interval '60 days'
                  ELSE statement_timestamp() + interval '60 days' END AS slot,
             CASE WHEN n <= %(expired)s THEN statement_timestamp() - interval '60 days'
                  ELSE statement_timestamp() END AS fired
      FROM generate_series(1, %(count)s) AS n) t
"""


def test_the_default_partition_s_expired_events_are_a_range_of_its_primary_key():
    """Retention's one-by-one purge of the default partition reads the expired events by
    their ids, not the whole partition: there is no index on event_ts."""
    from django_dsched.outbox.retention import COUNT_EVENTS, PURGE_EVENTS

    sql(DEFAULT_EVENTS_SQL, {"count": 20_000, "expired": 10})
    sql(f"ANALYZE {EVENTS}_default")
    try:
        cutoff = sql("SELECT statement_timestamp() - interval '45 days'")[0][0]
        args = {"cutoff": cutoff, "limit": 1000, "delivered": "DELIVERED", "skip": []}
        for what, query in (("purge", PURGE_EVENTS), ("count", COUNT_EVENTS)):
            plan = explain(query, args)
            scans = [
                n
                for n in nodes(plan["Plan"])
                if n.get("Relation Name") == f"{EVENTS}_default" and n.get("Actual Loops")
            ]
            read = sum(rows_read(n) for n in scans)
            assert read <= 50, (what, [(n["Node Type"], rows_read(n)) for n in scans])
        assert sql(COUNT_EVENTS, args) == [(10,)]
    finally:
        sql("TRUNCATE event_store_t")
