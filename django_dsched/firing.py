"""The fire path: claim due schedules and fire a batch of them in one transaction.

This is the product's hot loop, so it is set-based SQL on the raw connection. Per batch:

1. ``claim``: ``SELECT ... FOR UPDATE SKIP LOCKED`` the oldest due schedules (the database's
   clock, ``statement_timestamp()``, decides what is due, and is returned with the rows).
2. Python computes each schedule's fire slot and next run with :mod:`.recurrence`, the same
   code the admin and the API use.
3. ``write``: one statement checks the fence (this instance still holds the unexpired lease
   at its epoch, taken ``FOR SHARE`` so nobody can take the lease until we commit), advances
   every schedule (``UPDATE ... RETURNING`` the columns the event needs), and inserts every
   event and outbox row from what the update returned. The payload is built in SQL from the
   locked rows, so event data never round-trips through Python.

If the fence fails the statement writes nothing and the caller rolls back and steps down.
A second event for the same (schedule, slot) is refused by the database
(``dsched_event_one_per_slot``); the write skips such a row instead of failing the batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .enums import DeliveryStatus, ScheduleState
from .recurrence import due_slot_us, from_microseconds

logger = logging.getLogger(__name__)

# Times travel as microseconds since the epoch: parsing and formatting thousands of
# timestamps per batch costs more than the batch's SQL.
CLAIM = """
SELECT schedule_id::text, frequency_unit, frequency_time,
       (extract(epoch FROM start_ts) * 1000000)::bigint,
       (extract(epoch FROM next_run_ts) * 1000000)::bigint,
       (extract(epoch FROM statement_timestamp()) * 1000000)::bigint
FROM schedule_t
WHERE active AND next_run_ts <= statement_timestamp()
ORDER BY next_run_ts
LIMIT %s
FOR UPDATE SKIP LOCKED
"""

WRITE = """
WITH fence AS MATERIALIZED (
    SELECT epoch, set_config('dsched.firing', 'on', true)
    FROM scheduler_lock_t
    WHERE lock_id = %(lock_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
      AND last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
    FOR SHARE
),
batch AS MATERIALIZED (
    UPDATE schedule_t s
    SET next_run_ts = b.next_ts,
        aggregate_version = s.aggregate_version + 1,
        fire_count = s.fire_count + 1,
        last_fired_ts = statement_timestamp(),
        state = b.next_state,
        active = (b.next_state = %(active)s)
    FROM (
        SELECT id::uuid AS schedule_id,
               'epoch'::timestamptz + slot * interval '1 microsecond' AS slot_ts,
               'epoch'::timestamptz + next * interval '1 microsecond' AS next_ts,
               next_state
        FROM unnest(%(ids)s::text[], %(slots)s::bigint[], %(nexts)s::bigint[],
                    %(states)s::text[]) AS u(id, slot, next, next_state)
    ) AS b
    -- ANY() lets the planner probe the primary key instead of scanning the table.
    WHERE s.schedule_id = b.schedule_id AND s.schedule_id = ANY(%(ids)s::uuid[])
      AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.event_topic, s.event_type,
              s.event_data, s.aggregate_version AS version, b.slot_ts,
              gen_random_uuid() AS event_id, statement_timestamp() AS fired_ts
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts,
                               leader_epoch)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           jsonb_build_object(
               'specversion', '1.0',
               'id', event_id,
               'source', '/django-dsched/' || host_id,
               'subject', schedule_id,
               'type', event_type,
               'time', fired_ts,
               'datacontenttype', 'application/json',
               'topic', event_topic,
               'scheduledtime', slot_ts,
               'data', event_data),
           jsonb_build_object(
               'instance_id', %(instance)s::text,
               'leader_epoch', %(epoch)s::bigint,
               'schedule_name', schedule_name),
           slot_ts, %(epoch)s
    FROM batch
    ON CONFLICT DO NOTHING
    RETURNING id, host_id, aggregate_id, aggregate_version, event_type, event_ts, payload,
              metadata
),
outbox AS (
    INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
                                  aggregate_version, event_type, event_ts, payload,
                                  metadata, topic, status)
    SELECT e.id, e.host_id, e.aggregate_id, 'Schedule', e.aggregate_version, e.event_type,
           e.event_ts, e.payload, e.metadata, b.event_topic, %(pending)s
    FROM events e JOIN batch b ON b.event_id = e.id
)
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM events),
       -- Relays LISTEN on dsched_outbox: one notification per batch, sent at commit.
       (SELECT pg_notify('dsched_outbox', '') FROM fence),
       CASE WHEN %(names)s
            THEN (SELECT string_agg(schedule_name, ', ' ORDER BY schedule_name) FROM batch)
       END
"""

# Batches up to this size report the names of what fired (for the logs).
NAMED_BATCH = 10


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may fire: the lease holder at one epoch."""

    lock_id: int
    instance_id: str
    epoch: int
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class BatchResult:
    claimed: int
    fired: int
    duplicates: int
    fenced: bool
    db_now: datetime | None
    names: str | None = None


def plan(rows: list[tuple[Any, ...]]) -> tuple[list[str], list[int], list[int], list[str]]:
    """Slot and next run (microseconds) for each claimed row, from its grid and db now."""
    ids: list[str] = []
    slots: list[int] = []
    nexts: list[int] = []
    states: list[str] = []
    active, completed = ScheduleState.ACTIVE.value, ScheduleState.COMPLETED.value
    for schedule_id, unit, every, start, next_run, now in rows:
        slot, following = due_slot_us(unit, every, start, next_run, now)
        state = active
        if following is None:
            # The grid runs past the calendar's end: fire this last slot and complete.
            following, state = slot, completed
        ids.append(schedule_id)
        slots.append(slot)
        nexts.append(following)
        states.append(state)
    return ids, slots, nexts, states


def fire_batch(cursor: Any, fence: Fence, batch_size: int) -> BatchResult:
    """Claim and fire up to ``batch_size`` due schedules inside the caller's transaction.

    The caller owns the transaction: it commits when ``fenced`` is False and rolls back
    otherwise.
    """
    cursor.execute(CLAIM, [batch_size])
    rows = cursor.fetchall()
    if not rows:
        return BatchResult(0, 0, 0, False, None)
    ids, slots, nexts, states = plan(rows)
    cursor.execute(
        WRITE,
        {
            "lock_id": fence.lock_id,
            "instance": fence.instance_id,
            "epoch": fence.epoch,
            "lease": fence.lease_seconds,
            "ids": ids,
            "slots": slots,
            "nexts": nexts,
            "states": states,
            "pending": DeliveryStatus.PENDING.value,
            "active": ScheduleState.ACTIVE.value,
            "names": len(rows) <= NAMED_BATCH,
        },
    )
    written, fired, _notified, names = cursor.fetchone()
    if written == 0:
        return BatchResult(len(rows), 0, 0, True, from_microseconds(rows[0][5]))
    return BatchResult(
        len(rows), fired, written - fired, False, from_microseconds(rows[0][5]), names
    )


NEXT_DUE = """
SELECT extract(epoch FROM min(next_run_ts) - clock_timestamp())
FROM schedule_t WHERE active
"""


def seconds_until_next_due(cursor: Any) -> float | None:
    """Seconds (database clock) until the earliest active schedule is due; None if none."""
    cursor.execute(NEXT_DUE)
    (delay,) = cursor.fetchone()
    return None if delay is None else float(delay)
