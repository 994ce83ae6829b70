"""The batch's writes, behind the fence: fire the planned rows, set aside the others.

``WRITE`` advances every schedule (``UPDATE ... RETURNING`` the columns the event needs) and
inserts every event and outbox row from what the update returned, in one statement. The
payload is built in SQL from the locked rows, so event data never round-trips through
Python. It is stored once, in the event: the outbox row reads it by the shared id.
``SET_ASIDE`` takes the rows that cannot fire out of the poll with their error. The
:class:`Writer` runs both for one batch and, narrowing, finds the rows the database refuses.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from django.db import DatabaseError

from django_dsched.enums import ScheduleState
from django_dsched.firing.fence import AUDIT_METADATA, FENCE, with_buckets
from django_dsched.firing.overlap import (
    CANCEL_RUNS,
    CANCEL_RUNS_BUCKETS,
    OVERLAP,
    OVERLAP_BUCKETS,
    Step,
    cancel_params,
    step_arrays,
)
from django_dsched.firing.plan import REASON_MAX, Plan
from django_dsched.history import event_ids
from django_dsched.history.partitions import whole_days
from django_dsched.models import times
from django_dsched.runtime.arrays import array_literal
from django_dsched.runtime.refusals import refusal, refused

# The times of schedule_t that may be NULL.
NULLABLE_TIMES = ("end_ts", "paused_until", "last_fired_ts", "set_aside_ts")

OUTBOX_COLUMNS = """(id, host_id, aggregate_id, aggregate_type, aggregate_version,
                                  event_type, event_ts, topic, status, priority)"""

# An outbox row from an inserted event (``e``: the INSERT's RETURNING): the topic and the
# priority travel in the event itself, so no join with estimated row counts is needed
# (a nested loop over two 1,000-row CTEs once cost more than the rest of the batch).
# The payload and the metadata are stored once, in the event: the message has neither, and
# its readers take the event's by the shared id (the relay's claim, the admin, REST). A copy
# in the message would write 543 bytes more per fire, a quarter more than a fire writes.
OUTBOX_FROM_EVENT = """e.id, e.host_id, e.aggregate_id, 'Schedule', e.aggregate_version,
           e.event_type, e.event_ts, e.topic, %(pending)s, e.priority"""
# What the event insert returns for it (the topic and the priority, not the payload).
EVENT_FOR_OUTBOX = """id, host_id, aggregate_id, aggregate_version, event_type, event_ts,
              metadata->>'topic' AS topic, (metadata->>'priority')::smallint AS priority"""
# The end of a fire's event insert (``events``: a slot that already fired is skipped) and
# the outbox rows of the events it inserted; WRITE and FIRE_SLOTS (firing/on_demand.py) end so.
OUTBOX_OF_EVENTS = f"""    ON CONFLICT DO NOTHING
    RETURNING {EVENT_FOR_OUTBOX}
),
outbox AS (
    INSERT INTO outbox_message_t {OUTBOX_COLUMNS}
    SELECT {OUTBOX_FROM_EVENT}
    FROM events e
)"""


# 1 when the row fires a slot that has no event yet, else 0: fire_count counts distinct
# fired slots, so a slot that already fired (a backfill, then a catch-up) counts for nothing
# (the insert below refuses it). Every event of a slot was written at or after the slot, and
# last_fired_ts is the time of the newest one, so only a slot at or before last_fired_ts can
# have fired: the index is probed for those alone (a catch-up), never in steady firing. The
# row is locked since the claim, so no one else fires this schedule meanwhile. OFFSET 0
# keeps the probe a per-row index lookup (never a hash of the whole event table). An event
# of a slot has the slot's millisecond in its id (the CHECK dsched_event_slot_in_id), so the
# probe names the range of the batch's slots' ids (%(slot_ids_from)s, %(slot_ids_to)s:
# slot_ids()), as values: only their days are planned, not every day kept.
FRESH = """(CASE WHEN b.slot_ts IS NULL THEN 0
             WHEN s.last_fired_ts IS NULL OR b.slot_ts > s.last_fired_ts THEN 1
             WHEN EXISTS (SELECT FROM event_store_t e
                          WHERE e.aggregate_id = s.schedule_id AND e.scheduled_ts = b.slot_ts
                            AND e.id >= %(slot_ids_from)s::uuid
                            AND e.id <= %(slot_ids_to)s::uuid
                          OFFSET 0) THEN 0
             ELSE 1 END)"""

WRITE = f"""
WITH {FENCE},
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
        SELECT id::uuid AS schedule_id, slot,
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
              s.event_data, s.priority, s.aggregate_version AS version, b.slot_ts, s.bucket_key,
              {event_ids.sql("s.schedule_id", "b.slot")} AS event_id,
              statement_timestamp() AS fired_ts
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts,
                               leader_epoch)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           event_data,
           jsonb_build_object(
               'topic', event_topic,
               'instance_id', %(instance)s::text,
               'timeline', (SELECT timeline FROM fence),
               'schedule_name', schedule_name,
               'priority', priority,
               'trigger', 'schedule'),
           slot_ts, %(epoch)s
    FROM batch
    WHERE slot_ts IS NOT NULL
{OUTBOX_OF_EVENTS}
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM events),
       (SELECT count(*) FROM batch WHERE slot_ts IS NOT NULL),
       -- Relays LISTEN on dsched_outbox: one notification per batch, sent at commit.
       (SELECT pg_notify('dsched_outbox', '') FROM fence),
       CASE WHEN %(names)s
            THEN (SELECT string_agg(schedule_name, ', ' ORDER BY schedule_name)
                  FROM batch WHERE slot_ts IS NOT NULL)
       END,
       -- For metrics only (docs/observability.md): the statement's database time, from
       -- which the fire lag of each slot is computed, and the fires per topic (from the
       -- batch's plain column: reading each event's jsonb payload cost 2 per cent of a
       -- batch).
       (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
       CASE WHEN %(topics)s
            THEN (SELECT json_object_agg(event_topic, n)::text
                  FROM (SELECT event_topic, count(*) AS n
                        FROM batch WHERE slot_ts IS NOT NULL GROUP BY 1) t)
       END
"""

# A set-aside row's times, made storable (models/times.py): a row holding a time outside the
# years 1 to 9999 (written before the CHECK dsched_schedule_times_in_range) could not be
# written at all otherwise, not even to set it aside. Rows within the range keep theirs; the
# reason names what such a row held.
KEPT_TIMES = ", ".join(
    f"{column} = {times.storable(f's.{column}', nullable=column in NULLABLE_TIMES)}"
    for column in times.SCHEDULE_TIMES
    if column not in ("set_aside_ts", "updated_ts")  # written below
)
HELD = times.held("s", times.SCHEDULE_TIMES)

# Rows the planner could not plan leave the poll (state SET_ASIDE, active false) with their
# error, and each gets an audit event on its version sequence, under the same fence.
SET_ASIDE = f"""
WITH {FENCE},
aside AS (
    UPDATE schedule_t s
    SET state = %(set_aside)s, active = false, held_by = NULL,
        set_aside_reason = left(u.reason || COALESCE(' (' || NULLIF({HELD}, '') || ')', ''),
                                {REASON_MAX}),
        set_aside_ts = statement_timestamp(),
        aggregate_version = s.aggregate_version + 1, updated_ts = statement_timestamp(),
        {KEPT_TIMES}
    FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS u(schedule_id, reason)
    WHERE s.schedule_id = u.schedule_id AND s.active AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.origin, s.aggregate_version,
              s.set_aside_reason AS reason, s.bucket_key
),
audit AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, leader_epoch)
    SELECT {event_ids.change_sql("statement_timestamp()")}, host_id, schedule_id, 'Schedule',
           aggregate_version, 'dsched.schedule.set_aside', statement_timestamp(),
           jsonb_build_object(
               'actor', 'scheduler',
               'at', statement_timestamp(),
               'error', reason,
               'changes', jsonb_build_object(
                   'state', jsonb_build_array(%(active)s::text, %(set_aside)s::text))),
           {AUDIT_METADATA},
           %(epoch)s
    FROM aside
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM aside)
"""


WRITE_BUCKETS = with_buckets(WRITE)
SET_ASIDE_BUCKETS = with_buckets(SET_ASIDE)


class Writer:
    """The set-aside and write statements of one batch, and what they did. Narrowing
    (``narrow``): each runs under a savepoint, and a refused write is split in halves."""

    def __init__(self, cursor: Any, params: dict[str, Any], bucketed: bool, narrow: bool):
        self.cursor = cursor
        self.params = params
        self.bucketed = bucketed
        self.narrow = narrow
        self.fired = self.due_fires = self.set_aside_count = 0
        self.names: list[str] = []
        self.written_us: int | None = None
        self.topics: dict[str, int] = {}
        self.aside: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []
        self.quarantined: list[tuple[str, str]] = []
        self.error = ""  # the last refusal, while narrowing

    def _attempt(self, statement: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run ``statement``; narrowing, under a savepoint: None when the database refused
        a row's data (the savepoint undone, the error in ``self.error``)."""
        if not self.narrow:
            self.cursor.execute(statement, params)
            row: tuple[Any, ...] = self.cursor.fetchone()
            return row
        self.cursor.execute("SAVEPOINT dsched_narrow")
        try:
            self.cursor.execute(statement, params)
            row = self.cursor.fetchone()
        except DatabaseError as exc:
            if not refused(exc):
                raise
            self.cursor.execute("ROLLBACK TO SAVEPOINT dsched_narrow")
            self.cursor.execute("RELEASE SAVEPOINT dsched_narrow")
            self.error = refusal(exc, REASON_MAX)
            return None
        self.cursor.execute("RELEASE SAVEPOINT dsched_narrow")
        return row

    def run(self, statement: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run a statement behind the fence (the calendars' notes: firing/fates.py), as the
        batch's own are run; None: refused while narrowing."""
        return self._attempt(statement, params)

    def set_aside(self, rows: list[tuple[str, str]]) -> bool:
        """Set ``rows`` (schedule id, why) aside; False: the fence failed. Narrowing, one row
        at a time, and a row the database refuses to set aside is quarantined instead."""
        groups = [[row] for row in rows] if self.narrow else [rows]
        statement = SET_ASIDE_BUCKETS if self.bucketed else SET_ASIDE
        for group in groups:
            result = self._attempt(
                statement,
                {
                    **self.params,
                    "ids": [schedule_id for schedule_id, _ in group],
                    "reasons": [why for _, why in group],
                    "set_aside": ScheduleState.SET_ASIDE.value,
                },
            )
            if result is None:
                self.quarantined.extend((schedule_id, self.error) for schedule_id, _ in group)
                continue
            fenced, count = result
            if not fenced:
                return False
            self.set_aside_count += count
            if count:
                self.aside.extend(group)
        return True

    def _in_halves(
        self, ids: list[str], statement: str, arrays: Callable[[list[int]], dict[str, str]]
    ) -> Iterator[tuple[Any, ...]]:
        """Run ``statement`` over the rows ``ids`` (``arrays(part)``: the parameters of the
        rows at ``part``), yielding each result. Narrowing, a refused part is split in
        halves until each refused row is alone (``refused``)."""
        pending = [list(range(len(ids)))]
        while pending:
            part = pending.pop()
            result = self._attempt(statement, {**self.params, **arrays(part)})
            if result is None:
                if len(part) == 1:
                    self.refused.append((ids[part[0]], self.error))
                else:
                    half = len(part) // 2
                    pending += [part[half:], part[:half]]  # the first half goes next
                continue
            yield result

    def cancel(self, runs: list[str]) -> set[str] | None:
        """CANCEL_OTHER: delete the messages of ``runs`` never attempted; the ids deleted
        (None: the fence failed). Narrowing, a refusal cancels none (their slots are held)."""
        statement = CANCEL_RUNS_BUCKETS if self.bucketed else CANCEL_RUNS
        result = self._attempt(statement, {**self.params, **cancel_params(runs)})
        if result is None:
            return set()
        fenced, gone = result
        return set(gone or ()) if fenced else None

    def steps(self, steps: list[Step]) -> bool:
        """Write what the overlap policies decided; False: the fence failed."""
        statement = OVERLAP_BUCKETS if self.bucketed else OVERLAP
        ids = [step.schedule_id for step in steps]
        for fenced, _count in self._in_halves(
            ids, statement, lambda part: step_arrays([steps[i] for i in part])
        ):
            if not fenced:
                return False
        return True

    def write(self, statement: str, decided: Plan) -> bool:
        """Fire the planned rows; False: the fence failed. Narrowing, a refused part is
        split in halves until each refused row is alone (``refused``)."""
        for result in self._in_halves(decided.ids, statement, lambda part: _arrays(decided, part)):
            written, fired, due_fires, _notified, names, written_us, by_topic = result
            if written == 0:
                return False
            self.fired += fired
            self.due_fires += due_fires
            self.written_us = written_us
            if names:
                self.names.append(names)
            for topic, count in (json.loads(by_topic) if by_topic else {}).items():
                self.topics[topic] = self.topics.get(topic, 0) + count
        return True


def _arrays(decided: Plan, part: list[int]) -> dict[str, str]:
    """The write's per-row arrays for the rows at ``part`` (every row: the plan's own)."""
    whole = len(part) == len(decided.ids)

    def pick(values: list[Any]) -> list[Any]:
        return values if whole else [values[i] for i in part]

    slots = pick(decided.slots)
    return {
        **slot_ids(slots),
        "ids": array_literal(pick(decided.ids)),
        "slots": array_literal(slots),
        "next_slots": array_literal(pick(decided.next_slots)),
        "next_runs": array_literal(pick(decided.next_runs)),
        "states": array_literal(pick(decided.states)),
        "missed": array_literal(pick(decided.missed)),
    }


def slot_ids(slots: list[int | None]) -> dict[str, str]:
    """The range of the ids the events of ``slots`` (microseconds; None: no slot) can have
    (``FRESH``'s): the days of the first slot and of the last
    (:func:`.partitions.whole_days`); empty when none has a slot."""
    millis = [slot // 1000 & event_ids.MS_MASK for slot in slots if slot is not None]
    if not millis:
        return {"slot_ids_from": str(uuid.UUID(int=1)), "slot_ids_to": str(uuid.UUID(int=0))}
    low, high = whole_days(uuid.UUID(int=min(millis) << 80), uuid.UUID(int=max(millis) << 80))
    return {"slot_ids_from": str(low), "slot_ids_to": str(high)}
