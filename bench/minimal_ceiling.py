"""The minimal ceiling of the fire path: the three writes of a fire, by hand, on minimal tables.

``fire_bench.py ceiling`` writes the product's own tables and indexes by hand: it says what
those tables cost. This one says what a fire costs at the least: a table of schedules with
its primary key and a due index on ``next_run_ts`` (and nothing else), and an event table
and an outbox table with their primary keys alone, in a schema of their own
(``dsched_ceiling``), made anew for each run. Per batch of ``batch`` (one transaction): a
``SELECT ... FOR UPDATE SKIP LOCKED`` of the due schedules, one multi-row ``INSERT`` into
each of the event and outbox tables (from ``unnest``) and one ``UPDATE`` of the schedules;
the same ids, payload and WAL accounting as the product's runs. Used by ``fire_bench.py``
(``ceiling --minimal``, and ``scale``, which runs it beside the product at each size).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

SCHEMA = "dsched_ceiling"

TABLES = f"""
DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.schedule (
    schedule_id uuid PRIMARY KEY, host_id uuid NOT NULL, event_topic text NOT NULL,
    event_type text NOT NULL, event_data jsonb NOT NULL,
    aggregate_version bigint NOT NULL DEFAULT 1, fire_count bigint NOT NULL DEFAULT 0,
    next_slot_ts timestamptz NOT NULL, next_run_ts timestamptz NOT NULL,
    last_fired_ts timestamptz, active boolean NOT NULL DEFAULT true);
CREATE INDEX ON {SCHEMA}.schedule (next_run_ts) WHERE active;
CREATE TABLE {SCHEMA}.event (
    id uuid PRIMARY KEY, host_id uuid NOT NULL, aggregate_id uuid NOT NULL,
    aggregate_version bigint NOT NULL, event_type text NOT NULL, event_ts timestamptz NOT NULL,
    payload jsonb NOT NULL, scheduled_ts timestamptz NOT NULL);
CREATE TABLE {SCHEMA}.outbox (
    id uuid PRIMARY KEY, host_id uuid NOT NULL, aggregate_id uuid NOT NULL,
    aggregate_version bigint NOT NULL, event_type text NOT NULL, event_ts timestamptz NOT NULL,
    topic text NOT NULL, status text NOT NULL);
"""

CLAIM = f"""
SELECT schedule_id, host_id, event_topic, event_type, event_data::text, aggregate_version,
       (extract(epoch FROM next_slot_ts) * 1000000)::bigint
FROM {SCHEMA}.schedule
WHERE active AND next_run_ts <= statement_timestamp()
ORDER BY next_run_ts
LIMIT %s
FOR UPDATE SKIP LOCKED
"""
EVENTS = f"""
INSERT INTO {SCHEMA}.event (id, host_id, aggregate_id, aggregate_version, event_type,
                            event_ts, payload, scheduled_ts)
SELECT u.id, u.host, u.sid, u.version + 1, u.etype, statement_timestamp(), u.data::jsonb,
       'epoch'::timestamptz + u.slot * interval '1 microsecond'
FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::bigint[], %s::text[], %s::text[],
            %s::bigint[]) AS u(id, host, sid, version, etype, data, slot)
"""
OUTBOX = f"""
INSERT INTO {SCHEMA}.outbox (id, host_id, aggregate_id, aggregate_version, event_type,
                             event_ts, topic, status)
SELECT u.id, u.host, u.sid, u.version + 1, u.etype, statement_timestamp(), u.topic, 'PENDING'
FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::bigint[], %s::text[], %s::text[])
     AS u(id, host, sid, version, etype, topic)
"""


def update_sql(table: str) -> str:
    """The schedules' update of a batch (an hourly grid), for ``table``: the minimal one
    here, ``schedule_t`` in fire_bench.py's same-tables ceiling."""
    return f"""
UPDATE {table} s
SET next_slot_ts = s.next_slot_ts + interval '1 hour',
    next_run_ts = s.next_slot_ts + interval '1 hour',
    aggregate_version = s.aggregate_version + 1,
    fire_count = s.fire_count + 1,
    last_fired_ts = statement_timestamp()
FROM unnest(%s::uuid[]) AS u(sid)
WHERE s.schedule_id = u.sid
"""


UPDATE = update_sql(f"{SCHEMA}.schedule")
# What fire_bench.insert_schedules writes, into the minimal table.
INSERT = f"""
INSERT INTO {SCHEMA}.schedule (schedule_id, host_id, event_topic, event_type, event_data,
                               next_slot_ts, next_run_ts)
SELECT {{new_id}}, '00000000-0000-0000-0000-000000000000', 'bench', 'bench.tick',
       jsonb_build_object('n', i), now() - interval '30 minutes', now() - interval '30 minutes'
FROM generate_series(%s + 1, %s + %s) AS i
"""
# Fires/s while firing, as fire_bench.firing_rate reads the product's.
RATE = f"""SELECT extract(epoch FROM max(event_ts) - min(event_ts)), count(DISTINCT event_ts),
                  count(*)
           FROM {SCHEMA}.event"""


def drain(
    conn: psycopg.Connection[Any],
    cur: psycopg.Cursor[Any],
    statements: tuple[str, str, str, str],
    batch: int,
    event_id: Callable[[Any, int], Any],
) -> None:
    """Fire batches of ``batch`` until nothing is due, one transaction each: ``statements``
    are the claim, the events' insert, the outbox's insert and the schedules' update (these
    tables', or fire_bench.py's on the product's tables)."""
    claim, insert_events, insert_outbox, update = statements
    while True:
        with conn.transaction():
            rows = cur.execute(claim, [batch]).fetchall()
            if not rows:
                return
            sids, hosts, topics, types, data, versions, slots = map(list, zip(*rows, strict=True))
            eids = [event_id(sid, slot) for sid, slot in zip(sids, slots, strict=True)]
            events = [eids, hosts, sids, versions, types, data, slots]
            cur.execute(insert_events, events, binary=True)
            cur.execute(insert_outbox, [*events[:5], topics], binary=True)
            cur.execute(update, [sids], binary=True)


def run(
    url: str,
    schedules: int,
    batch: int,
    new_id: str,
    event_id: Callable[[Any, int], Any],
    checkpoint: bool,
) -> dict[str, float]:
    """Make ``schedules`` due hourly schedules in fresh minimal tables and drain them; the
    rate, the WAL per fire and the wall time. The tables are dropped afterwards."""
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(TABLES)
        chunk = 100_000
        for offset in range(0, schedules, chunk):
            cur.execute(
                INSERT.format(new_id=new_id), [offset, offset, min(chunk, schedules - offset)]
            )
        cur.execute(f"VACUUM ANALYZE {SCHEMA}.schedule")
        if checkpoint:
            cur.execute("CHECKPOINT")
        wal = cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        started = time.monotonic()
        drain(conn, cur, (CLAIM, EVENTS, OUTBOX, UPDATE), batch, event_id)
        wall = time.monotonic() - started
        end = cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        span, batches, written = cur.execute(RATE).fetchone()
        cur.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    if written != schedules:
        raise SystemExit(f"minimal ceiling: expected {schedules} fires, found {written}")
    span = float(span)
    rate = schedules / span * (batches - 1) / batches if batches > 1 else float("nan")
    return {
        "rate": rate,
        "wall": wall,
        "wal": float(end - wal) / schedules,
        "span": span,
        "batches": batches,
    }
