"""The relay's hand-written ceiling, shared by relay_bench.py and pipeline_bench.py: one
claiming UPDATE (returning each message's envelope, composed from its event as the relay's
claim composes it), a no-op, one UPDATE marking the batch delivered. Import after
``setup_django.configure``."""

from __future__ import annotations

from django_dsched.models import envelope

CEILING_CLAIM = f"""
UPDATE outbox_message_t m
SET claimed_by = 'ceiling', attempts = m.attempts + 1, picked_ts = clock_timestamp(),
    claimed_until = clock_timestamp() + interval '60 s'
FROM (SELECT o.id FROM outbox_message_t o
      WHERE o.status = 'PENDING'
        AND GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until) <= statement_timestamp()
      ORDER BY o.priority DESC, GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until)
      LIMIT %s FOR UPDATE SKIP LOCKED) c
WHERE m.id = c.id
RETURNING m.id, (SELECT {envelope.sql("e")}::text FROM event_store_t e WHERE e.id = m.id)
"""
CEILING_SETTLE = """
UPDATE outbox_message_t
SET status = 'DELIVERED', delivered_ts = clock_timestamp(), claimed_by = '',
    claimed_until = NULL
WHERE id = ANY(%s)
"""
