"""The fire path's ceiling on the product's own tables, shared by fire_bench.py (``ceiling``,
``scale``) and pipeline_bench.py (``e2e``): per batch, one transaction of a ``SELECT ... FOR
UPDATE SKIP LOCKED`` of the due schedules, one multi-row ``INSERT`` into ``event_store_t`` and
one into ``outbox_message_t`` (the same ids; the payload only in the event, as the product
stores it) and one ``UPDATE`` of ``schedule_t``, by hand in psycopg
(``minimal_ceiling.drain(conn, cur, STATEMENTS, batch, event_id)``)."""

from __future__ import annotations

import minimal_ceiling

CEILING_CLAIM = """
SELECT schedule_id, host_id, event_topic, event_type, event_data::text, aggregate_version,
       (extract(epoch FROM next_slot_ts) * 1000000)::bigint
FROM schedule_t
WHERE active AND next_run_ts <= statement_timestamp()
ORDER BY next_run_ts, priority DESC
LIMIT %s
FOR UPDATE SKIP LOCKED
"""
CEILING_EVENTS = """
INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                           event_type, event_ts, payload, metadata, scheduled_ts)
SELECT u.id, u.host, u.sid, 'Schedule', u.version + 1, u.etype, statement_timestamp(),
       u.data::jsonb, '{}', 'epoch'::timestamptz + u.slot * interval '1 microsecond'
FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::bigint[], %s::text[], %s::text[],
            %s::bigint[]) AS u(id, host, sid, version, etype, data, slot)
"""
CEILING_OUTBOX = """
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                              event_type, event_ts, topic, status)
SELECT u.id, u.host, u.sid, 'Schedule', u.version + 1, u.etype, statement_timestamp(),
       u.topic, 'PENDING'
FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::bigint[], %s::text[], %s::text[])
     AS u(id, host, sid, version, etype, topic)
"""
CEILING_UPDATE = minimal_ceiling.update_sql("schedule_t")

STATEMENTS = (CEILING_CLAIM, CEILING_EVENTS, CEILING_OUTBOX, CEILING_UPDATE)
