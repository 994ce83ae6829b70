"""What a scrape reads: the database gauges' statement walks indexes, never the tables.

``EXPLAIN (ANALYZE, FORMAT JSON)`` with 40,000 schedules (a few due, a few set aside) and
40,000 delivered outbox messages (a few pending, a few dead letters): every scan of
``schedule_t`` and ``outbox_message_t`` is an index scan, and none reads more than the rows
it counts (plus the bounded priority walk).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.metrics.database import GAUGES, gauge_params, read_gauges
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

BIG = 40_000


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def test_the_gauges_statement_reads_indexes_only_a_few_rows_each():
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data, state, active)
        SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000', 'g-' || i,
               'HOURS', 1, now(),
               now() + CASE WHEN i <= 7 THEN interval '-1 minute' ELSE interval '1 hour' END,
               now(), 'g', 'g.tick', '{}'::jsonb,
               CASE WHEN i > %s - 3 THEN %s ELSE %s END, i <= %s - 3
        FROM generate_series(1, %s) AS i
        """,
        [BIG, ScheduleState.SET_ASIDE.value, ScheduleState.ACTIVE.value, BIG, BIG],
    )
    sql(
        "UPDATE schedule_t SET set_aside_ts = now(), set_aside_reason = 'x' WHERE state = %s",
        [ScheduleState.SET_ASIDE.value],
    )
    make_messages(BIG, status=DeliveryStatus.DELIVERED, age=3600)
    make_messages(9, age=60)
    make_messages(4, status=DeliveryStatus.DELIVERY_FAILED)
    sql("ANALYZE schedule_t")
    sql("ANALYZE outbox_message_t")

    gauges = read_gauges()
    assert (gauges.due, gauges.set_aside, gauges.outbox_pending) == (7, 3, 9)
    assert (gauges.outbox_ready, gauges.dead_letters) == (9, 4)

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + GAUGES, gauge_params())
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    scans = [
        n
        for n in nodes(plan[0]["Plan"])
        if n.get("Relation Name") in ("schedule_t", "outbox_message_t")
    ]
    assert scans
    for scan in scans:
        assert "Index" in scan["Node Type"], scan["Node Type"]
        read = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan["Actual Loops"]
        assert read <= 20, (scan["Node Type"], scan.get("Index Name"), read)
