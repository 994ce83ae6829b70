"""Helpers for relay tests: pending outbox messages (and their events) without a fire."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection

from django_dsched.enums import DeliveryStatus
from django_dsched.history import event_ids

DEFAULT_HOST = uuid.UUID(int=0)

# Each message with its event (same id), which holds its data and topic, as a fire writes
# them: the id is the fire's (event_ids: a function of the schedule and the slot, which the
# partitioned event table checks), and the envelope is composed from the event when
# delivered (models/envelope.py). Each message is the fire of a schedule of its own.
INSERT = f"""
WITH g AS (
    SELECT sid, n, ts, (extract(epoch FROM ts) * 1000000)::bigint AS slot_us
    FROM (SELECT gen_random_uuid() AS sid, n,
                 date_trunc('milliseconds', statement_timestamp())
                     - make_interval(secs => %(age)s)
                     - (%(count)s - n) * interval '1 microsecond' AS ts
          FROM generate_series(1, %(count)s) AS n) AS x
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts)
    SELECT {event_ids.sql("g.sid", "g.slot_us")}, %(host)s::uuid, g.sid, 'Schedule', 1,
           %(type)s, g.ts, jsonb_build_object('n', g.n), jsonb_build_object('topic', %(topic)s),
           g.ts
    FROM g
    RETURNING id, host_id, aggregate_id, event_type, event_ts
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                              event_type, event_ts, topic, status, priority, delivered_ts)
SELECT e.id, e.host_id, e.aggregate_id, 'Schedule', 1, e.event_type, e.event_ts, %(topic)s,
       %(status)s, %(priority)s,
       CASE WHEN %(status)s = 'DELIVERED' THEN statement_timestamp() END
FROM events e
RETURNING id, event_ts
"""


def make_messages(
    count: int = 1,
    *,
    topic: str = "reports",
    event_type: str = "report.build",
    priority: int = 0,
    age: float = 0.0,
    status: str = DeliveryStatus.PENDING,
    host_id: uuid.UUID | str = DEFAULT_HOST,
    using: Any = None,
) -> list[uuid.UUID]:
    """Insert ``count`` messages and their events; their ids, oldest first."""
    with (using or connection).cursor() as cursor:
        cursor.execute(
            INSERT,
            {
                "count": count,
                "topic": topic,
                "type": event_type,
                "priority": priority,
                "age": age,
                "status": str(status),
                "host": str(host_id),
            },
        )
        return [id_ for id_, _ in sorted(cursor.fetchall(), key=lambda row: row[1])]


def statuses() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM outbox_message_t GROUP BY status")
        return dict(cursor.fetchall())


def envelope_text(event_id: Any) -> str:
    """The envelope of event ``event_id`` as the database composes it: the text a transport
    sends, byte for byte."""
    from django_dsched.models import envelope

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {envelope.sql('e')}::text FROM event_store_t e WHERE e.id = %s", [event_id]
        )
        (text,) = cursor.fetchone()
    return str(text)


def waiting_over_days_sql(days: int) -> str:
    """Messages fired over the past ``days`` days (the n-th: day n % days back, ids by the
    time they fired), on a backoff or held by another relay's live claim, at two
    priorities: none claimable, all in the ready index. Parameter: ``count``."""
    return f"""
WITH t AS (
    SELECT n, statement_timestamp() - (n %% {days} + 1) * interval '1 day'
              + (n / {days}) * interval '1 ms' AS ts
    FROM generate_series(1, %(count)s) AS n
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status, priority, attempts, last_error, next_attempt_ts,
    claimed_by, claimed_until)
SELECT {event_ids.change_sql("t.ts")}, '00000000-0000-0000-0000-000000000000',
       gen_random_uuid(), 'Schedule', 1, 'report.build', t.ts, 'reports', 'PENDING',
       CASE WHEN n %% 3 = 0 THEN 5 ELSE 0 END, 1, 'down',
       CASE WHEN n %% 10 <> 0
            THEN statement_timestamp() + interval '1 hour' + (n %% 600) * interval '1s' END,
       CASE WHEN n %% 10 = 0 THEN 'elsewhere' ELSE '' END,
       CASE WHEN n %% 10 = 0 THEN statement_timestamp() + interval '1 minute' END
FROM t
"""


def celery_route(
    broker_url: str, queue: str, tasks: list[str], option_keys: list[str]
) -> dict[str, Any]:
    """The Celery route docs/migrating-from-celery-beat.md gives (the operator's host alone):
    the data names the task, among ``tasks``, and sets the options ``option_keys``."""
    return {
        "BACKEND": "celery",
        "OPTIONS": {
            "BROKER_URL": broker_url,
            "QUEUE": queue,
            "TASK_FROM_DATA": True,
            "ALLOWED_TASKS": tasks,
            "OPTIONS_FROM_DATA": option_keys,
        },
    }


def celery_tasks_waiting(redis_url: str, queue: str) -> list[dict[str, Any]]:
    """The headers of the task messages waiting in a queue of a Redis broker (a list there),
    oldest first, as a Celery worker would take them."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(raw)["headers"] for raw in reversed(client.lrange(queue, 0, -1))]
    finally:
        client.close()
