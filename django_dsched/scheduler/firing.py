"""The fire path: claim due schedules and fire a batch of them in one transaction.

This is the product's hot loop, so it is set-based SQL on the raw connection. Per batch:

1. ``claim``: ``SELECT ... FOR UPDATE SKIP LOCKED`` the oldest due schedules (the database's
   clock, ``statement_timestamp()``, decides what is due, and is returned with the rows).
2. Python computes each schedule's fire slot and next run with :mod:`..timetables`, the
   same code the admin and the API use.
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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_dsched.enums import DeliveryStatus, MisfirePolicy, ScheduleKind, ScheduleState
from django_dsched.timetables import Rules, decide, timetable_for
from django_dsched.timetables.grid import due_slot_us, from_microseconds, to_microseconds

logger = logging.getLogger(__name__)

# The CloudEvents 1.0 envelope of a fire, built in SQL from the fired schedule's columns.
ENVELOPE = """jsonb_build_object(
               'specversion', '1.0',
               'id', event_id,
               'source', '/django-dsched/' || host_id,
               'subject', schedule_id,
               'type', event_type,
               'time', fired_ts,
               'datacontenttype', 'application/json',
               'topic', event_topic,
               'scheduledtime', slot_ts,
               'data', event_data)"""

OUTBOX_COLUMNS = """(id, host_id, aggregate_id, aggregate_type, aggregate_version,
                                  event_type, event_ts, payload, metadata, topic, status,
                                  priority)"""

# An outbox row from an inserted event (``e``: the INSERT's RETURNING): the topic and the
# priority travel in the event itself, so no join with estimated row counts is needed
# (a nested loop over two 1,000-row CTEs once cost more than the rest of the batch).
OUTBOX_FROM_EVENT = """e.id, e.host_id, e.aggregate_id, 'Schedule', e.aggregate_version,
           e.event_type, e.event_ts, e.payload, e.metadata, e.payload->>'topic',
           %(pending)s, (e.metadata->>'priority')::smallint"""

# Times travel as microseconds since the epoch: parsing and formatting thousands of
# timestamps per batch costs more than the batch's SQL.
CLAIM = """
SELECT schedule_id::text, schedule_kind, frequency_unit, frequency_time,
       (extract(epoch FROM start_ts) * 1000000)::bigint,
       (extract(epoch FROM next_slot_ts) * 1000000)::bigint,
       (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
       cron_expression, time_zone, misfire_policy, misfire_grace_seconds, catch_up_limit,
       (extract(epoch FROM end_ts) * 1000000)::bigint, max_fires, fire_count, jitter_seconds
FROM schedule_t
WHERE active AND next_run_ts <= statement_timestamp()
ORDER BY next_run_ts, priority DESC
LIMIT %s
FOR UPDATE SKIP LOCKED
"""

# 1 when the row fires a slot that has no event yet, else 0: fire_count counts distinct
# fired slots, so a slot that already fired (a backfill, then a catch-up) counts for nothing
# (the insert below refuses it). Every event of a slot was written at or after the slot, and
# last_fired_ts is the time of the newest one, so only a slot at or before last_fired_ts can
# have fired: the index is probed for those alone (a catch-up), never in steady firing. The
# row is locked since the claim, so no one else fires this schedule meanwhile. OFFSET 0
# keeps the probe a per-row index lookup (never a hash of the whole event table).
FRESH = """(CASE WHEN b.slot_ts IS NULL THEN 0
             WHEN s.last_fired_ts IS NULL OR b.slot_ts > s.last_fired_ts THEN 1
             WHEN EXISTS (SELECT FROM event_store_t e
                          WHERE e.aggregate_id = s.schedule_id AND e.scheduled_ts = b.slot_ts
                          OFFSET 0) THEN 0
             ELSE 1 END)"""

WRITE = f"""
WITH fence AS MATERIALIZED (
    SELECT epoch, set_config('dsched.firing', 'on', true)
    FROM scheduler_lock_t
    WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
      AND last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
    FOR SHARE
),
batch AS MATERIALIZED (
    UPDATE schedule_t s
    SET next_slot_ts = b.next_slot_ts,
        next_run_ts = b.next_run_ts,
        aggregate_version = s.aggregate_version + (b.slot_ts IS NOT NULL)::int,
        fire_count = s.fire_count + {FRESH},
        misfire_count = s.misfire_count + b.missed::int,
        last_fired_ts = CASE WHEN b.slot_ts IS NULL THEN s.last_fired_ts
                             ELSE statement_timestamp() END,
        -- max_fires is reached by distinct fires only, so it is decided here.
        state = CASE WHEN b.next_state = %(active)s
                          AND s.fire_count + {FRESH} >= s.max_fires
                     THEN %(completed)s ELSE b.next_state END,
        active = b.next_state = %(active)s
                 AND (s.fire_count + {FRESH} < s.max_fires) IS NOT FALSE
    FROM (
        SELECT id::uuid AS schedule_id,
               'epoch'::timestamptz + slot * interval '1 microsecond' AS slot_ts,
               'epoch'::timestamptz + next_slot * interval '1 microsecond' AS next_slot_ts,
               'epoch'::timestamptz + next_run * interval '1 microsecond' AS next_run_ts,
               next_state, missed
        FROM unnest(%(ids)s::text[], %(slots)s::bigint[], %(next_slots)s::bigint[],
                    %(next_runs)s::bigint[], %(states)s::text[], %(missed)s::boolean[])
             AS u(id, slot, next_slot, next_run, next_state, missed)
    ) AS b
    -- ANY() lets the planner probe the primary key instead of scanning the table.
    WHERE s.schedule_id = b.schedule_id AND s.schedule_id = ANY(%(ids)s::uuid[])
      AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.event_topic, s.event_type,
              s.event_data, s.priority, s.aggregate_version AS version, b.slot_ts,
              gen_random_uuid() AS event_id, statement_timestamp() AS fired_ts
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts,
                               leader_epoch)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           {ENVELOPE},
           jsonb_build_object(
               'instance_id', %(instance)s::text,
               'leader_epoch', %(epoch)s::bigint,
               'schedule_name', schedule_name,
               'priority', priority,
               'trigger', 'schedule'),
           slot_ts, %(epoch)s
    FROM batch
    WHERE slot_ts IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING id, host_id, aggregate_id, aggregate_version, event_type, event_ts, payload,
              metadata
),
outbox AS (
    INSERT INTO outbox_message_t {OUTBOX_COLUMNS}
    SELECT {OUTBOX_FROM_EVENT}
    FROM events e
)
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM events),
       (SELECT count(*) FROM batch WHERE slot_ts IS NOT NULL),
       -- Relays LISTEN on dsched_outbox: one notification per batch, sent at commit.
       (SELECT pg_notify('dsched_outbox', '') FROM fence),
       CASE WHEN %(names)s
            THEN (SELECT string_agg(schedule_name, ', ' ORDER BY schedule_name)
                  FROM batch WHERE slot_ts IS NOT NULL)
       END
"""

# Batches up to this size report the names of what fired (for the logs).
NAMED_BATCH = 10


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may fire: the lease holder at one epoch."""

    lease_id: int
    instance_id: str
    epoch: int
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class BatchResult:
    claimed: int
    fired: int
    duplicates: int
    fenced: bool
    names: str | None = None


@dataclass(slots=True)
class Plan:
    """Per claimed row: the slot to fire (or None), the next slot and run, the new state."""

    ids: list[str] = field(default_factory=list)
    slots: list[int | None] = field(default_factory=list)
    next_slots: list[int] = field(default_factory=list)
    next_runs: list[int] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    missed: list[bool] = field(default_factory=list)

    def add(
        self,
        schedule_id: str,
        slot: int | None,
        next_slot: int | None,
        next_run: int | None,
        missed: bool,
    ) -> None:
        self.ids.append(schedule_id)
        self.slots.append(slot)
        if next_slot is None or next_run is None:
            # Nothing comes after: the schedule completes (its next run stays put).
            last = slot if slot is not None else 0
            self.next_slots.append(last)
            self.next_runs.append(last)
            self.states.append(COMPLETED)
        else:
            self.next_slots.append(next_slot)
            self.next_runs.append(next_run)
            self.states.append(ACTIVE)
        self.missed.append(missed)


ACTIVE, COMPLETED = ScheduleState.ACTIVE.value, ScheduleState.COMPLETED.value
INTERVAL, COALESCE = ScheduleKind.INTERVAL.value, MisfirePolicy.COALESCE.value


def plan(rows: list[tuple[Any, ...]]) -> Plan:
    """Decide, for each claimed row, what to fire and when it runs next (microseconds).

    ``max_fires`` completes a schedule in ``WRITE``, which knows whether a fire was a new
    slot; here a schedule that already reached it completes without firing.
    """
    result = Plan()
    for row in rows:
        (schedule_id, kind, unit, every, start, next_slot, now, cron, zone, policy, grace,
         limit, end, max_fires, fires, jitter_s) = row  # fmt: skip
        if (
            kind == INTERVAL
            and policy == COALESCE
            and grace is None
            and end is None
            and max_fires is None
            and not jitter_s
        ):
            # The common case: plain integer arithmetic on the grid where it is exact.
            slot, following = due_slot_us(unit, every, start, next_slot, now, zone)
            result.add(schedule_id, slot, following, following, slot > next_slot)
            continue
        if max_fires is not None and fires >= max_fires:
            result.add(schedule_id, None, None, None, False)
            continue
        table = timetable_for(
            kind,
            start=from_microseconds(start),
            unit=unit,
            every=every,
            cron=cron,
            time_zone=zone,
        )
        rules = Rules(
            policy=policy,
            grace_seconds=grace,
            catch_up_limit=limit,
            end=None if end is None else from_microseconds(end),
            jitter_seconds=jitter_s,
            jitter_key=schedule_id,
        )
        decision = decide(table, rules, from_microseconds(next_slot), from_microseconds(now), fires)
        after = decision.next_slot
        result.add(
            schedule_id,
            None if decision.slot is None else to_microseconds(decision.slot),
            None if after is None else to_microseconds(after),
            None if after is None else to_microseconds(rules.run_time(table, after)),
            decision.missed,
        )
    return result


def array_literal(values: list[Any]) -> str:
    """A PostgreSQL array literal of ids, enum names, integers, booleans or None.

    Sent as one text parameter and cast in SQL: binding thousands of array elements one by
    one costs more client time than the batch's SQL. Only values that need no quoting go
    here (UUIDs, upper-case names, numbers).
    """
    return "{" + ",".join(map(_array_element, values)) + "}"


def _array_element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


def fire_batch(cursor: Any, fence: Fence, batch_size: int) -> BatchResult:
    """Claim and fire up to ``batch_size`` due schedules inside the caller's transaction.

    The caller owns the transaction: it commits when ``fenced`` is False and rolls back
    otherwise.
    """
    cursor.execute(CLAIM, [batch_size])
    rows = cursor.fetchall()
    if not rows:
        return BatchResult(0, 0, 0, False)
    decided = plan(rows)
    cursor.execute(
        WRITE,
        {
            "lease_id": fence.lease_id,
            "instance": fence.instance_id,
            "epoch": fence.epoch,
            "lease": fence.lease_seconds,
            "ids": array_literal(decided.ids),
            "slots": array_literal(decided.slots),
            "next_slots": array_literal(decided.next_slots),
            "next_runs": array_literal(decided.next_runs),
            "states": array_literal(decided.states),
            "missed": array_literal(decided.missed),
            "pending": DeliveryStatus.PENDING.value,
            "active": ACTIVE,
            "completed": COMPLETED,
            "names": len(rows) <= NAMED_BATCH,
        },
    )
    written, fired, due_fires, _notified, names = cursor.fetchone()
    if written == 0:
        return BatchResult(len(rows), 0, 0, True)
    return BatchResult(len(rows), fired, due_fires - fired, False, names)


NEXT_DUE = """
SELECT extract(epoch FROM min(next_run_ts) - clock_timestamp())
FROM schedule_t WHERE active
"""


def seconds_until_next_due(cursor: Any) -> float | None:
    """Seconds (database clock) until the earliest active schedule is due; None if none."""
    cursor.execute(NEXT_DUE)
    (delay,) = cursor.fetchone()
    return None if delay is None else float(delay)


# Fires given slots of one schedule outside the leader's loop: "run now" and backfills.
# The schedule row is locked, so it serializes with the leader's fires; the database
# refuses a slot that already fired (ON CONFLICT DO NOTHING skips it).
FIRE_SLOTS = f"""
WITH target AS MATERIALIZED (
    -- The state is checked under the row lock: a schedule cancelled a moment ago
    -- never fires, whatever its caller read before.
    SELECT * FROM schedule_t
    WHERE schedule_id = %(id)s AND state = ANY(%(states)s::text[])
    FOR UPDATE
),
slots AS (
    SELECT 'epoch'::timestamptz + slot * interval '1 microsecond' AS slot_ts, ord
    FROM unnest(%(slots)s::bigint[]) WITH ORDINALITY AS u(slot, ord)
),
fired AS MATERIALIZED (
    SELECT t.*, s.slot_ts, t.aggregate_version + s.ord AS version,
           gen_random_uuid() AS event_id, statement_timestamp() AS fired_ts
    FROM target t CROSS JOIN slots s
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           {ENVELOPE},
           jsonb_build_object(
               'schedule_name', schedule_name,
               'priority', priority,
               'trigger', %(trigger)s::text,
               'actor', %(actor)s::text),
           slot_ts
    FROM fired
    ON CONFLICT DO NOTHING
    RETURNING id, host_id, aggregate_id, aggregate_version, event_type, event_ts, payload,
              metadata
),
outbox AS (
    INSERT INTO outbox_message_t {OUTBOX_COLUMNS}
    SELECT {OUTBOX_FROM_EVENT}
    FROM events e
),
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


def fire_slots(
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
