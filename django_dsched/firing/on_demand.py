"""Run now and backfills: given slots of one schedule fired outside the leader's loop."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_dsched.cluster.lease import TIMELINE
from django_dsched.enums import DeliveryStatus
from django_dsched.firing.arrays import array_literal
from django_dsched.firing.write import OUTBOX_OF_EVENTS
from django_dsched.history import event_ids
from django_dsched.timetables.grid import to_microseconds

# Fires given slots of one schedule outside the leader's loop: "run now" and backfills.
# The schedule row is locked, so it serializes with the leader's fires; the database
# refuses a slot that already fired, and the insert skips it (ON CONFLICT DO NOTHING: the
# event's id, a function of the slot, or the exactly-once index finds it).
FIRE_SLOTS = f"""
WITH target AS MATERIALIZED (
    -- The state is checked under the row lock: a schedule cancelled a moment ago
    -- never fires, whatever its caller read before.
    SELECT * FROM schedule_t
    WHERE schedule_id = %(id)s AND state = ANY(%(states)s::text[])
    FOR UPDATE
),
slots AS (
    SELECT slot, 'epoch'::timestamptz + slot * interval '1 microsecond' AS slot_ts, ord
    FROM unnest(%(slots)s::bigint[]) WITH ORDINALITY AS u(slot, ord)
),
fired AS MATERIALIZED (
    SELECT t.*, s.slot_ts, t.aggregate_version + s.ord AS version,
           {event_ids.sql("t.schedule_id", "s.slot")} AS event_id,
           statement_timestamp() AS fired_ts
    FROM target t CROSS JOIN slots s
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           event_data,
           jsonb_build_object(
               'topic', event_topic,
               'schedule_name', schedule_name,
               'priority', priority,
               'trigger', %(trigger)s::text,
               'actor', %(actor)s::text,
               'timeline', {TIMELINE}),
           slot_ts
    FROM fired
{OUTBOX_OF_EVENTS},
advanced AS (
    UPDATE schedule_t s
    SET aggregate_version = s.aggregate_version + (SELECT count(*) FROM slots),
        fire_count = s.fire_count + (SELECT count(*) FROM events),
        last_fired_ts = CASE WHEN EXISTS (SELECT FROM events) THEN statement_timestamp()
                             ELSE s.last_fired_ts END
    FROM target t
    WHERE s.schedule_id = t.schedule_id
)
SELECT (SELECT count(*) FROM target), (SELECT count(*) FROM events),
       (SELECT pg_notify('dsched_outbox', '') FROM target)
"""


def fire_on_demand(
    cursor: Any,
    schedule_id: Any,
    slots: list[datetime],
    *,
    states: list[str],
    trigger: str,
    actor: str,
) -> int | None:
    """Fire ``slots`` of one schedule now (in the caller's transaction); return how many
    fired (slots that had already fired are skipped by the database), or None when the
    schedule does not exist or is not in one of ``states``."""
    cursor.execute(
        FIRE_SLOTS,
        {
            "id": schedule_id,
            "states": array_literal(states),
            "slots": [to_microseconds(slot) for slot in slots],
            "trigger": trigger,
            "actor": actor,
            "pending": DeliveryStatus.PENDING.value,
        },
    )
    found, fired, _notified = cursor.fetchone()
    return int(fired) if found else None
