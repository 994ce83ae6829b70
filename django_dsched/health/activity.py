"""The cluster's last hour minute by minute: fires, deliveries, dead letters, and the
delivery backlog (the cluster page's charts).

Three grouped reads, each a range of an index: the fires of the hour's slots (a range of the
events' primary key: a fire's id carries its slot's millisecond; a fire written in the hour
for an older slot is not counted), the deliveries recorded in the hour
(``dsched_outbox_delivered_idx``), the dead letters of the hour (few). The backlog at the
end of each minute is worked back from the pending messages now: each minute after it
added its fires and took away its deliveries and dead letters. Minutes on the database's
clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.history import event_ids

MINUTES = 60

ACTIVITY = """
SELECT 'fires', date_trunc('minute', e.event_ts), count(*)
FROM event_store_t e
WHERE e.id >= %(id_floor)s AND e.event_ts >= %(start)s AND e.scheduled_ts IS NOT NULL
GROUP BY 2
UNION ALL
SELECT 'deliveries', date_trunc('minute', o.delivered_ts), count(*)
FROM outbox_message_t o
WHERE o.status = %(delivered)s AND o.delivered_ts >= %(start)s
GROUP BY 2
UNION ALL
SELECT 'dead', date_trunc('minute', o.failed_ts), count(*)
FROM outbox_message_t o
WHERE o.status = %(dead)s AND o.failed_ts >= %(start)s
GROUP BY 2
UNION ALL
SELECT 'pending', NULL, count(*) FROM outbox_message_t o WHERE o.status = %(pending)s
"""


@dataclass(frozen=True, slots=True)
class Activity:
    """Per minute, oldest first (``minutes[i]`` is the start of minute i; the last one is
    the current minute, still going on)."""

    minutes: list[datetime]
    fires: list[int]
    deliveries: list[int]
    dead_letters: list[int]
    backlog: list[int]  # pending messages at the end of each minute (the last: now)


def last_hour(now: datetime, using: str | None = None) -> Activity:
    """The last :data:`MINUTES` minutes up to ``now`` (the database's clock)."""
    this_minute = now.replace(second=0, microsecond=0)
    start = this_minute - timedelta(minutes=MINUTES - 1)
    minutes = [start + timedelta(minutes=i) for i in range(MINUTES)]
    index = {minute: i for i, minute in enumerate(minutes)}
    series = {name: [0] * MINUTES for name in ("fires", "deliveries", "dead")}
    pending = 0
    with connections[using or app_settings.DATABASE].cursor() as cursor:
        cursor.execute(
            ACTIVITY,
            {
                "id_floor": event_ids.id_floor(start),
                "start": start,
                "delivered": DeliveryStatus.DELIVERED.value,
                "dead": DeliveryStatus.DELIVERY_FAILED.value,
                "pending": DeliveryStatus.PENDING.value,
            },
        )
        for name, minute, count in cursor.fetchall():
            if name == "pending":
                pending = int(count)
            elif minute in index:
                series[name][index[minute]] += int(count)
    backlog = [0] * MINUTES
    level = pending
    for i in range(MINUTES - 1, -1, -1):
        backlog[i] = max(0, level)
        level += series["deliveries"][i] + series["dead"][i] - series["fires"][i]
    return Activity(minutes, series["fires"], series["deliveries"], series["dead"], backlog)
