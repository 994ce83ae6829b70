"""Helpers for relay tests: pending outbox messages without going through a fire."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection

from django_dsched.enums import DeliveryStatus

DEFAULT_HOST = uuid.UUID(int=0)

INSERT = """
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                              event_type, event_ts, payload, metadata, topic, status, priority,
                              delivered_ts)
SELECT g.id, %(host)s::uuid, g.id, 'Schedule', 1, %(type)s,
       statement_timestamp() - make_interval(secs => %(age)s)
           - (%(count)s - g.n) * interval '1 microsecond',
       jsonb_build_object('specversion', '1.0', 'id', g.id, 'type', %(type)s,
                          'source', '/django-dsched/' || %(host)s, 'subject', g.id,
                          'topic', %(topic)s, 'time', statement_timestamp(),
                          'datacontenttype', 'application/json',
                          'data', jsonb_build_object('n', g.n)),
       '{}'::jsonb, %(topic)s, %(status)s, %(priority)s,
       CASE WHEN %(status)s = 'DELIVERED' THEN statement_timestamp() END
FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, %(count)s) AS n) g
RETURNING id
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
    """Insert ``count`` messages, oldest first in id order of the returned list."""
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
        ids = [row[0] for row in cursor.fetchall()]
    return ids


def statuses() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM outbox_message_t GROUP BY status")
        return dict(cursor.fetchall())
