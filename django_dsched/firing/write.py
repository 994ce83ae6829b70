"""The fire path: claim due schedules and fire a batch of them in one transaction.

This is the product's hot loop, so it is set-based SQL on the raw connection. Per batch:

1. ``claim``: ``SELECT ... FOR UPDATE SKIP LOCKED`` the oldest due schedules (the database's
   clock, ``statement_timestamp()``, decides what is due, and is returned with the rows).
2. Python computes each schedule's fire slot and next run with :mod:`django_dsched.timetables`, the
   same code the admin and the API use, within a time budget (rows it has no time for are
   left as they are and taken by the next batch). A row that cannot be planned (a zone
   this host does not know, a cron croniter refuses) is set aside with its error, in the
   same transaction; the rest of the batch fires.
3. ``write``: one statement checks the fence (this instance still holds the unexpired lease
   at its epoch, taken ``FOR SHARE`` so nobody can take the lease until we commit), advances
   every schedule (``UPDATE ... RETURNING`` the columns the event needs), and inserts every
   event and outbox row from what the update returned. The payload is built in SQL from the
   locked rows, so event data never round-trips through Python. It is stored once, in the
   event: the outbox row reads it by the shared id.

If the fence fails the statement writes nothing and the caller rolls back and steps down.
A second event for the same (schedule, slot) is refused by the database (a unique index on
(aggregate_id, scheduled_ts) in each partition of ``event_store_t``: see
``django_dsched.history.partitions``); a fire's id is a function of (schedule, slot), so the
write skips such a row (``ON CONFLICT DO NOTHING``, under the primary key or that index)
instead of failing the batch.
Any other refusal (another constraint, a trigger, a value out of range) fails the write:
the caller rolls the batch back and runs it again with ``narrow=True``, which writes it in
halves under savepoints until the refused rows are found, sets them aside with the
database's error and fires the rest in the same transaction (:func:`fire_batch`).
Event ids are a function of (schedule, slot) (:mod:`django_dsched.history.event_ids`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError

from django_dsched.cluster.buckets import LOCK_STRIDE
from django_dsched.cluster.lease import TIMELINE
from django_dsched.enums import DeliveryStatus, MisfirePolicy, ScheduleKind, ScheduleState
from django_dsched.exceptions import ScheduleDataError
from django_dsched.firing.throttle import Throttle
from django_dsched.history import event_ids
from django_dsched.runtime.refusals import refused, sqlstate
from django_dsched.timetables import Rules, backlog_window, decide, timetable_for
from django_dsched.timetables.grid import (
    MICROSECOND,
    due_slot_us,
    from_microseconds,
    to_microseconds,
)

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


def microseconds(column: str) -> str:
    """SQL: a timestamptz column as microseconds since the epoch; NULL for +/-infinity, so a
    row holding one can never make the claim itself fail (planning sets it aside)."""
    return f"CASE WHEN isfinite({column}) THEN (extract(epoch FROM {column}) * 1000000)::bigint END"


# Times travel as microseconds since the epoch: parsing and formatting thousands of
# timestamps per batch costs more than the batch's SQL. Nothing here can fail on a row's
# values: every column comes back as stored, to be judged by plan(), row by row.
CLAIM_COLUMNS = f"""schedule_id::text, schedule_kind, frequency_unit, frequency_time,
       {microseconds("start_ts")},
       {microseconds("next_slot_ts")},
       (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
       cron_expression, time_zone, misfire_policy, misfire_grace_seconds, catch_up_limit,
       {microseconds("end_ts")}, max_fires, fire_count, jitter_seconds"""

# With buckets (DSCHED_BUCKETS > 1) the claim takes only rows of the buckets this instance
# holds (no filter when it holds them all) and returns each row's bucket key, so the write
# fences exactly the buckets it touches.
IN_BUCKETS = "(bucket_key & %(mask)s) = ANY(%(buckets)s::int[])"
# Rows this instance could neither fire nor set aside (the database refused both) wait in
# its quarantine (the loop's): the claim passes over them for a while.
NOT_QUARANTINED = "schedule_id <> ALL(%(skip)s::uuid[])"
# Hosts over their fire rate (firing/throttle.py) whose bucket cannot pay a tick's fires:
# the claim passes over their rows, which stay due. With any rate set, the claim also returns
# each row's host, for its token.
NOT_HELD_BACK = "host_id <> ALL(%(held_back)s::uuid[])"
# A second before the last claim that found rows (the caller's, in microseconds): a row
# that came due just before that claim but committed after it (a create, an edit, a pause
# that ended) is still on time. The first claim of a process takes one backlog window
# before now.
SINCE = """COALESCE('epoch'::timestamptz + %(since)s::bigint * interval '1 microsecond'
                  - interval '1 second',
                  statement_timestamp() - make_interval(secs => %(window)s))"""


def claim_statement(
    *, buckets: bool = False, every_bucket: bool = False, skip: bool = False, hosts: bool = False
) -> str:
    """The claim: on-time work first, then the backlog, never more than ``%(limit)s`` rows.

    ``fresh`` takes the rows that came due since the previous claim (``SINCE``), oldest
    first, up to the whole batch, or the batch less ``%(backlog_share)s`` when anything else
    waits (``waiting``: one probe): whatever is on time is claimed in the next round,
    however large the backlog. ``again`` then takes the rows the previous batch fired that
    were due again at once (a catch-up, a slot due within the backlog window:
    ``%(again)s``, primary-key probes), and ``backlog`` the rows due before ``SINCE``,
    oldest first, each up to what is left of the batch: so a backlog drains even while
    on-time work would fill the batch. The parts take disjoint rows (by ``SINCE`` and by
    id), so no row is claimed twice; all skip rows locked by others. A claim shorter than
    the batch therefore left no due row that was free (what NEXT_DUE relies on), but those
    of held-back hosts, and but a share left for a backlog locked by others. ``fresh`` and
    ``backlog`` walk the due index. ``hosts`` (a fire rate is set somewhere): each row's
    host comes back (before the bucket key), and the rows of held-back hosts are passed
    over."""
    columns = (
        CLAIM_COLUMNS + (", host_id::text" if hosts else "") + (", bucket_key" if buckets else "")
    )
    where = "active"
    if buckets and not every_bucket:
        where += f" AND {IN_BUCKETS}"
    if skip:
        where += f" AND {NOT_QUARANTINED}"
    if hosts:
        where += f" AND {NOT_HELD_BACK}"
    return f"""
WITH since AS MATERIALIZED (SELECT {SINCE} AS ts),
-- Whether anything waits besides the on-time rows (one probe of the due index): only then
-- does the on-time part leave the backlog its share. The oldest row's time, not EXISTS: the
-- planner cannot know `since`, guesses a third of the rows qualify, and would answer an
-- EXISTS (which drops ORDER BY and LIMIT) by reading the table until a row does: all of
-- it when none does. ORDER BY ... LIMIT 1 is the head of the due index's range.
waiting AS MATERIALIZED (
    SELECT cardinality(%(again)s::uuid[]) > 0
           OR (SELECT next_run_ts FROM schedule_t
               WHERE {where} AND next_run_ts <= (SELECT ts FROM since)
               ORDER BY next_run_ts LIMIT 1) IS NOT NULL AS yes
),
fresh AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE {where} AND next_run_ts <= statement_timestamp()
      AND next_run_ts > (SELECT ts FROM since)
    ORDER BY next_run_ts, priority DESC
    LIMIT greatest(0, %(limit)s
                      - CASE WHEN (SELECT yes FROM waiting) THEN %(backlog_share)s ELSE 0 END)
    FOR UPDATE SKIP LOCKED
),
again AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE schedule_id = ANY(%(again)s::uuid[]) AND {where}
      AND next_run_ts <= (SELECT ts FROM since)
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fresh))
    FOR UPDATE SKIP LOCKED
),
backlog AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE {where} AND next_run_ts <= (SELECT ts FROM since)
      AND schedule_id <> ALL(%(again)s::uuid[])
    ORDER BY next_run_ts, priority DESC
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fresh) - (SELECT count(*) FROM again))
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM fresh UNION ALL SELECT * FROM again UNION ALL SELECT * FROM backlog
"""


# (buckets, every bucket, skip, hosts) -> the claim; built once here, picked per batch.
CLAIMS = {
    (buckets, every, skip, hosts): claim_statement(
        buckets=buckets, every_bucket=every, skip=skip, hosts=hosts
    )
    for buckets in (False, True)
    for every in (False, True)
    for skip in (False, True)
    for hosts in (False, True)
    if buckets or not every
}
CLAIM = CLAIMS[False, False, False, False]  # no buckets, nothing quarantined, no rates
# The least part of a batch the backlog gets while on-time work would fill it.
BACKLOG_SHARE = 0.1


def claim_args(
    limit: int,
    since_us: int | None = None,
    skip: Collection[str] = (),
    again: Collection[str] = (),
    held_back: Collection[str] = (),
) -> dict[str, Any]:
    """The parameters of a claim of ``limit`` rows (see :func:`claim_statement`)."""
    return {
        "held_back": list(held_back),
        "limit": limit,
        "since": since_us,
        "again": list(again),
        "window": backlog_window().total_seconds(),
        "backlog_share": max(1, int(limit * BACKLOG_SHARE)),
        "skip": list(skip),
    }


# This instance still holds the unexpired lease at its epoch; FOR SHARE keeps anyone from
# taking the lease until the transaction ends. dsched.firing keeps the NOTIFY trigger quiet.
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

# The fence also reads the server's timeline, which each event records in its metadata: two
# histories of one database (a failover with asynchronous replication) tell their fires apart.
FENCE = f"""fence AS MATERIALIZED (
    SELECT epoch, set_config('dsched.firing', 'on', true), {TIMELINE} AS timeline
    FROM scheduler_lock_t
    WHERE lock_id = %(lease_id)s AND instance_id = %(instance)s AND epoch = %(epoch)s
      AND last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
      AND buckets = 1
    FOR SHARE
)"""

# With buckets: every bucket the batch touches is held by this instance at its epoch,
# unexpired, FOR SHARE (nobody takes any of them until the transaction ends), and the
# cluster still runs with this instance's bucket count.
FENCE_BUCKETS = f"""fence AS MATERIALIZED (
    SELECT max(f.epoch) AS epoch, set_config('dsched.firing', 'on', true),
           {TIMELINE} AS timeline
    FROM (SELECT l.epoch FROM scheduler_lock_t l
          JOIN unnest(%(locks)s::int[], %(epochs)s::bigint[]) AS u(lock_id, epoch)
            ON l.lock_id = u.lock_id AND l.epoch = u.epoch
          WHERE l.instance_id = %(instance)s
            AND l.last_heartbeat > clock_timestamp() - make_interval(secs => %(lease)s)
          FOR SHARE OF l) AS f
    HAVING count(*) = %(fenced)s
       AND EXISTS (SELECT FROM scheduler_lock_t c
                   WHERE c.lock_id = %(lease_id)s AND c.buckets = %(bucket_count)s)
)"""
# The epoch an event records: its bucket's.
BUCKET_EPOCH = "(%(epoch_map)s::bigint[])[(bucket_key & %(mask)s) + 1]"

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
    ON CONFLICT DO NOTHING
    RETURNING {EVENT_FOR_OUTBOX}
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

# Batches up to this size report the names of what fired (for the logs).
NAMED_BATCH = 10

# Rows the planner could not plan leave the poll (state SET_ASIDE, active false) with their
# error, and each gets an audit event on its version sequence, under the same fence.
SET_ASIDE = f"""
WITH {FENCE},
aside AS (
    UPDATE schedule_t s
    SET state = %(set_aside)s, active = false,
        set_aside_reason = u.reason, set_aside_ts = statement_timestamp(),
        aggregate_version = s.aggregate_version + 1, updated_ts = statement_timestamp()
    FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS u(schedule_id, reason)
    WHERE s.schedule_id = u.schedule_id AND s.active AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.origin, s.aggregate_version,
              u.reason, s.bucket_key
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
           jsonb_build_object(
               'actor', 'scheduler',
               'schedule_name', schedule_name,
               'origin', origin,
               'instance_id', %(instance)s::text,
               'leader_epoch', %(epoch)s::bigint),
           %(epoch)s
    FROM aside
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM aside)
"""


def with_buckets(statement: str) -> str:
    """``statement`` (WRITE or SET_ASIDE) fenced on the batch's buckets, each event carrying
    its bucket's epoch."""
    return statement.replace(FENCE, FENCE_BUCKETS).replace("%(epoch)s", BUCKET_EPOCH)


WRITE_BUCKETS = with_buckets(WRITE)
SET_ASIDE_BUCKETS = with_buckets(SET_ASIDE)

# Longest error text kept on a set-aside schedule.
REASON_MAX = 2000
# Why a row whose start or next slot is +/-infinity is set aside (the claim reads them
# as NULL).
NOT_FINITE = f"{ScheduleDataError.__name__}: start_ts or next_slot_ts is not a finite time"


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may fire: the lease holder at one epoch; with buckets (``bucket_count > 1``), the
    holder of ``buckets`` at ``epochs`` (``lease_id``: bucket 0's row, DSCHED_LEASE_ID)."""

    lease_id: int
    instance_id: str
    epoch: int
    lease_seconds: float
    bucket_count: int = 1
    buckets: tuple[int, ...] = ()
    epochs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchResult:
    claimed: int
    fired: int
    duplicates: int
    fenced: bool
    names: str | None = None
    set_aside: int = 0
    # The rows set aside and why: (schedule id, error).
    aside: tuple[tuple[str, str], ...] = ()
    # Claimed rows left for the next batch (the planning budget ran out) and fired rows
    # still due (a catch-up's next slot): either way there is more to do at once.
    deferred: int = 0
    again: int = 0
    # For metrics (docs/observability.md): the write's database time (microseconds), the
    # slots it wrote (microseconds; None for a row that did not fire), how many rows missed
    # slots and the fires per topic (these two with ``fire_batch(metrics=True)``).
    written_us: int | None = None
    slots: Sequence[int | None] = ()
    misfired: int = 0
    topics: dict[str, int] | None = None
    # With ``narrow=True``: rows whose fire the database refused (set aside, in ``aside``
    # too), and rows it refused to set aside as well (left active: the caller quarantines
    # them). Each with the database's error.
    refused: tuple[tuple[str, str], ...] = ()
    quarantined: tuple[tuple[str, str], ...] = ()
    # The claim's database time (microseconds) and the rows due again at once: the
    # ``since_us`` and ``again`` of the next batch.
    claimed_at: int | None = None
    again_ids: tuple[str, ...] = ()
    # Claimed rows left unplanned because their host was over its fire rate (no token):
    # released at commit, claimed again once it has tokens.
    throttled: int = 0


@dataclass(slots=True)
class Plan:
    """Per claimed row: the slot to fire (or None), the next slot and run, the new state."""

    ids: list[str] = field(default_factory=list)
    slots: list[int | None] = field(default_factory=list)
    next_slots: list[int] = field(default_factory=list)
    next_runs: list[int] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    missed: list[bool] = field(default_factory=list)
    # Rows that could not be planned: (schedule id, error), to be set aside.
    aside: list[tuple[str, str]] = field(default_factory=list)
    # Rows not planned because the budget ran out (left as they are).
    deferred: int = 0
    # Planned rows whose next run is already due (and their ids).
    again: int = 0
    again_ids: list[str] = field(default_factory=list)

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


def plan(rows: list[tuple[Any, ...]], deadline: float | None = None) -> Plan:
    """Decide, for each claimed row, what to fire and when it runs next (microseconds).

    Rows on the integer fast path are always planned (they cost a microsecond or two).
    The others are planned until the monotonic clock passes ``deadline``; the rest are
    left out of the plan (``deferred``): unchanged, they are released at commit and taken
    by the next batch, so a slow batch shrinks instead of outliving the lease. A row whose
    planning raises is set aside with its error; the others are planned as usual.
    """
    result = Plan()
    slow: list[tuple[Any, ...]] = []
    # One backlog window for the whole batch, on both paths (timetables.misfire).
    window = backlog_window()
    window_us = window // MICROSECOND
    for row in rows:
        (schedule_id, kind, unit, every, start, next_slot, now, _cron, _zone, policy, grace,
         _limit, end, max_fires, _fires, jitter_s) = row  # fmt: skip
        if start is None or next_slot is None:
            result.aside.append((schedule_id, NOT_FINITE))
            continue
        if (
            kind == INTERVAL
            and policy == COALESCE
            and grace is None
            and end is None
            and max_fires is None
            and not jitter_s
        ):
            # The common case: plain integer arithmetic on the grid where it is exact.
            # COALESCE without jitter or grace is the grid's latest slot one backlog window
            # ago (or the next slot when it came due since), as misfire.decide computes it.
            try:
                slot, following = due_slot_us(unit, every, start, next_slot, now - window_us, _zone)
            except Exception as exc:  # any error here is this row's alone
                result.aside.append((schedule_id, reason(exc)))
                continue
            result.add(schedule_id, slot, following, following, slot > next_slot)
            if following is not None and following <= now:
                result.again += 1
                result.again_ids.append(schedule_id)
            continue
        slow.append(row)
    for index, row in enumerate(slow):
        if index and deadline is not None and time.monotonic() > deadline:
            result.deferred = len(slow) - index
            break
        try:
            _plan_one(result, row, window)
        except Exception as exc:  # any error here is this row's alone
            result.aside.append((row[0], reason(exc)))
    return result


def _plan_one(result: Plan, row: tuple[Any, ...], window: timedelta | None = None) -> None:
    """Plan one row through the timetables (every kind, policy and bound).

    ``max_fires`` completes a schedule in ``WRITE``, which knows whether a fire was a new
    slot; here a schedule that already reached it completes without firing. ``window``:
    the batch's backlog window (default: read from the settings).
    """
    (schedule_id, kind, unit, every, start, next_slot, now, cron, zone, policy, grace,
     limit, end, max_fires, fires, jitter_s) = row  # fmt: skip
    if max_fires is not None and fires >= max_fires:
        result.add(schedule_id, None, None, None, False)
        return
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
    decision = decide(
        table, rules, from_microseconds(next_slot), from_microseconds(now), fires, window
    )
    after = decision.next_slot
    next_run = None if after is None else to_microseconds(rules.run_time(table, after))
    result.add(
        schedule_id,
        None if decision.slot is None else to_microseconds(decision.slot),
        None if after is None else to_microseconds(after),
        next_run,
        decision.missed,
    )
    if next_run is not None and next_run <= now:
        result.again += 1
        result.again_ids.append(schedule_id)


def reason(exc: BaseException) -> str:
    """An error as kept on a set-aside schedule: its type and message, bounded."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text[:REASON_MAX]


def refusal(exc: BaseException) -> str:
    """A database refusal as kept on a set-aside schedule: the error's class, SQLSTATE and
    primary message (not its DETAIL, which repeats the row's values)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    diag = getattr(cause, "diag", None)
    message = getattr(diag, "message_primary", None) or str(cause).split("\n", 1)[0]
    return f"{type(cause).__name__} ({sqlstate(exc)}): {message}".strip()[:REASON_MAX]


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


def fire_batch(
    cursor: Any,
    fence: Fence,
    batch_size: int,
    *,
    deadline: float | None = None,
    keep_lease: Callable[[], bool] | None = None,
    metrics: bool = False,
    narrow: bool = False,
    skip: Collection[str] = (),
    since_us: int | None = None,
    again: Collection[str] = (),
    throttle: Throttle | None = None,
) -> BatchResult:
    """Claim and fire up to ``batch_size`` due schedules inside the caller's transaction.

    Planning stops at ``deadline`` (monotonic): what is planned is written, the rest is
    left for the next batch. Before writing, ``keep_lease()`` may renew the lease (inside
    this transaction); False means the lease is lost. The caller owns the transaction: it
    commits when ``fenced`` is False and rolls back otherwise. ``metrics``: also count the
    fires per topic and the rows that missed slots (docs/observability.md).

    A row the database refuses (a constraint, a trigger) fails the whole write. The caller
    then rolls back and calls again with ``narrow=True``: the set-aside and the write run
    under savepoints, a refused write is split in halves until each refused row is alone,
    and those rows are set aside with the database's error while the rest fires
    (``refused``); a row the database will not even set aside is reported in
    ``quarantined`` for the caller to pass over (``skip``: ids the claim passes over).

    On-time work first: the rows ``again`` (the previous batch's ``again_ids``) and the rows
    that came due after ``since_us`` (the ``claimed_at`` of the caller's previous batch that
    claimed any; None: one backlog window ago) are claimed before the rows due earlier,
    which fill the rest of the batch (:func:`claim_statement`).

    ``throttle``: the hosts' fire rates (:mod:`.throttle`). The claim passes over the hosts
    it holds back, and a claimed row whose host has no token left is not planned
    (``throttled``): unchanged, it is released at commit and claimed again later.
    """
    bucketed = fence.bucket_count > 1
    hosts = throttle is not None and throttle.active
    params: dict[str, Any] = {
        "lease_id": fence.lease_id,
        "instance": fence.instance_id,
        "epoch": fence.epoch,
        "lease": fence.lease_seconds,
        "active": ACTIVE,
        "completed": COMPLETED,
    }
    held_back = throttle.held_back() if hosts and throttle is not None else ()
    claim_params = claim_args(batch_size, since_us, skip, again, held_back)
    if bucketed:
        if not fence.buckets:
            return BatchResult(0, 0, 0, False)
        params.update(bucket_params(fence), limit=batch_size)
        every = len(fence.buckets) == fence.bucket_count
        cursor.execute(CLAIMS[True, every, bool(skip), hosts], {**params, **claim_params})
        keyed = cursor.fetchall()
        mask = fence.bucket_count - 1
        touched = sorted({row[-1] & mask for row in keyed})
        rows = [row[:-1] for row in keyed]
        held = dict(zip(fence.buckets, fence.epochs, strict=True))
        params["locks"] = [fence.lease_id + b * LOCK_STRIDE for b in touched]
        params["epochs"] = [held[b] for b in touched]
        params["fenced"] = len(touched)
    else:
        cursor.execute(CLAIMS[False, False, bool(skip), hosts], claim_params)
        rows = cursor.fetchall()
    if not rows:
        return BatchResult(0, 0, 0, False)
    claimed = len(rows)
    claimed_at = rows[0][6]
    throttled = 0
    if hosts and throttle is not None:
        # One token per row (a row fires one slot per batch at most); the others wait.
        ready = [row[:-1] for row in rows if throttle.take(row[-1])]
        throttled = claimed - len(ready)
        rows = ready
    decided = plan(rows, deadline)
    if keep_lease is not None and not keep_lease():
        return BatchResult(claimed, 0, 0, True)
    writer = _Writer(cursor, params, bucketed, narrow)
    if decided.aside and not writer.set_aside(decided.aside):
        return BatchResult(claimed, 0, 0, True)
    if decided.ids:
        write = WRITE_BUCKETS if bucketed else WRITE
        params.update(
            pending=DeliveryStatus.PENDING.value, names=claimed <= NAMED_BATCH, topics=metrics
        )
        if not writer.write(write, decided):
            return BatchResult(claimed, 0, 0, True)
        if writer.refused and not writer.set_aside(writer.refused):
            return BatchResult(claimed, 0, 0, True)
    return BatchResult(
        claimed,
        writer.fired,
        writer.due_fires - writer.fired,
        False,
        ", ".join(writer.names) or None,
        set_aside=writer.set_aside_count,
        aside=tuple(writer.aside),
        deferred=decided.deferred,
        again=decided.again,
        written_us=writer.written_us,
        slots=decided.slots,
        misfired=decided.missed.count(True) if metrics else 0,
        topics=writer.topics or None,
        refused=tuple(writer.refused),
        quarantined=tuple(writer.quarantined),
        claimed_at=claimed_at,
        again_ids=tuple(decided.again_ids),
        throttled=throttled,
    )


class _Writer:
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
            self.error = refusal(exc)
            return None
        self.cursor.execute("RELEASE SAVEPOINT dsched_narrow")
        return row

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

    def write(self, statement: str, decided: Plan) -> bool:
        """Fire the planned rows; False: the fence failed. Narrowing, a refused part is
        split in halves until each refused row is alone (``refused``)."""
        pending = [list(range(len(decided.ids)))]
        while pending:
            part = pending.pop()
            result = self._attempt(statement, {**self.params, **_arrays(decided, part)})
            if result is None:
                if len(part) == 1:
                    self.refused.append((decided.ids[part[0]], self.error))
                else:
                    half = len(part) // 2
                    pending += [part[half:], part[:half]]  # the first half goes next
                continue
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

    return {
        "ids": array_literal(pick(decided.ids)),
        "slots": array_literal(pick(decided.slots)),
        "next_slots": array_literal(pick(decided.next_slots)),
        "next_runs": array_literal(pick(decided.next_runs)),
        "states": array_literal(pick(decided.states)),
        "missed": array_literal(pick(decided.missed)),
    }


# Run in the transaction of a claim that came back short: transaction_timestamp() is then
# no later than the claim, so an active row due by then that is still due was skipped
# because another transaction holds its lock (an admin save, an API call). The next due
# time is taken among the rows not yet due then, so such a row never reads as "due now".
NEXT_DUE = """
SELECT extract(epoch FROM (SELECT min(next_run_ts) FROM schedule_t
                           WHERE active AND next_run_ts > transaction_timestamp()
                             AND next_run_ts < 'infinity'{bucket_filter}) - clock_timestamp()),
       EXISTS (SELECT FROM schedule_t WHERE active AND next_run_ts <= transaction_timestamp()
                                            {bucket_filter}{skip_filter})
"""
NEXT_DUE_BUCKETS = NEXT_DUE.format(bucket_filter=f" AND {IN_BUCKETS}", skip_filter="")
NEXT_DUE_BUCKETS_SKIPPING = NEXT_DUE.format(
    bucket_filter=f" AND {IN_BUCKETS}", skip_filter=f" AND {NOT_QUARANTINED}"
)
NEXT_DUE_SKIPPING = NEXT_DUE.format(bucket_filter="", skip_filter=f" AND {NOT_QUARANTINED}")
# With held-back hosts (their rows are due but wait for tokens, not for a lock): (buckets,
# skip) -> the statement.
NEXT_DUE_HOLDING = {
    (buckets, skip): NEXT_DUE.format(
        bucket_filter=f" AND {IN_BUCKETS}" if buckets else "",
        skip_filter=(f" AND {NOT_QUARANTINED}" if skip else "") + f" AND {NOT_HELD_BACK}",
    )
    for buckets in (False, True)
    for skip in (False, True)
}
NEXT_DUE = NEXT_DUE.format(bucket_filter="", skip_filter="")


def bucket_params(fence: Fence) -> dict[str, Any]:
    """The parameters of the bucket variants of the claim, the write and NEXT_DUE."""
    epoch_map = [0] * fence.bucket_count
    for bucket, epoch in zip(fence.buckets, fence.epochs, strict=True):
        epoch_map[bucket] = epoch
    return {
        "mask": fence.bucket_count - 1,
        "buckets": list(fence.buckets),
        "bucket_count": fence.bucket_count,
        "epoch_map": array_literal(epoch_map),
    }


@dataclass(frozen=True, slots=True)
class NextDue:
    seconds: float | None  # until the next schedule falls due (database clock); None: none
    locked: bool  # a due schedule was skipped: another transaction holds its row


def next_due(
    cursor: Any,
    fence: Fence | None = None,
    skip: Collection[str] = (),
    held_back: Collection[str] = (),
) -> NextDue:
    """When to look again; call it in the transaction of the last (short) claim (with
    buckets: among the buckets ``fence`` holds; ``skip``: quarantined ids, and
    ``held_back``: hosts over their fire rate, whose rows are due but not waiting on a
    lock)."""
    some = fence is not None and 1 < fence.bucket_count != len(fence.buckets)
    if held_back:
        params: dict[str, Any] = {"held_back": list(held_back), "skip": list(skip)}
        if some and fence is not None:
            params.update(bucket_params(fence))
        cursor.execute(NEXT_DUE_HOLDING[some, bool(skip)], params)
    elif some and fence is not None:
        if skip:
            cursor.execute(NEXT_DUE_BUCKETS_SKIPPING, {**bucket_params(fence), "skip": list(skip)})
        else:
            cursor.execute(NEXT_DUE_BUCKETS, bucket_params(fence))
    elif skip:
        cursor.execute(NEXT_DUE_SKIPPING, {"skip": list(skip)})
    else:
        cursor.execute(NEXT_DUE)
    delay, locked = cursor.fetchone()
    return NextDue(None if delay is None else float(delay), bool(locked))


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
    ON CONFLICT DO NOTHING
    RETURNING {EVENT_FOR_OUTBOX}
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
