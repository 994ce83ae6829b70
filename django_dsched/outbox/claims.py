"""Claim, extend, release and settle outbox messages: the relay's only raw SQL.

A message is *claimable* when it is PENDING, its next attempt is due and nobody holds an
unexpired claim on it (``claimed_until``, the visibility timeout). A claim is one statement
(``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``) that stamps the
claimer, the claim's expiry and the attempt number, so two relays never hold the same message
at once.

``(claimed_by, attempts)`` is the claim's fencing token: every claim bumps ``attempts``, and
every later write for that claim (extend, release, outcome) matches both, so a relay whose
claim expired and was taken over cannot overwrite the newer claim's outcome.

All times are the database's (``statement_timestamp()``, ``clock_timestamp()``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_dsched.enums import DeliveryStatus

# Longest error text stored per message.
ERROR_MAX_CHARS = 2000

CLAIM = """
WITH candidates AS (
    SELECT id
    FROM outbox_message_t
    WHERE status = %(pending)s
      AND (next_attempt_ts IS NULL OR next_attempt_ts <= statement_timestamp())
      AND (claimed_until IS NULL OR claimed_until < statement_timestamp())
      AND (%(topics)s::text[] IS NULL OR topic = ANY(%(topics)s::text[]))
    ORDER BY priority DESC, event_ts
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_message_t m
SET attempts = CASE WHEN m.attempts >= %(max_attempts)s THEN m.attempts ELSE m.attempts + 1 END,
    claimed_by = CASE WHEN m.attempts >= %(max_attempts)s THEN '' ELSE %(relay)s END,
    claimed_until = CASE WHEN m.attempts >= %(max_attempts)s THEN NULL
                         ELSE clock_timestamp() + make_interval(secs => %(visibility)s) END,
    -- Claimed max_attempts times with no outcome recorded (each claimer died or hung):
    -- dead-letter it here rather than let it crash one more relay.
    status = CASE WHEN m.attempts >= %(max_attempts)s THEN %(dead)s ELSE m.status END,
    last_error = CASE WHEN m.attempts >= %(max_attempts)s
                      THEN 'claimed ' || m.attempts || ' times without a recorded outcome'
                           || ' (the relays holding it died or hung). Last error: '
                           || m.last_error
                      ELSE m.last_error END
FROM candidates c
WHERE m.id = c.id
RETURNING m.id, m.topic, m.event_type, m.payload, m.attempts, m.priority, m.event_ts, m.status
"""

# Keep a claim alive during a long batch; returns the ids still ours.
EXTEND = """
UPDATE outbox_message_t m
SET claimed_until = clock_timestamp() + make_interval(secs => %(visibility)s)
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND m.claimed_by = %(relay)s
  AND m.status = %(pending)s
RETURNING m.id
"""

# Give back claims not attempted (a relay stopping gracefully): claimable again at once, and
# the unused attempt is not counted.
RELEASE = """
UPDATE outbox_message_t m
SET claimed_by = '', claimed_until = NULL, attempts = m.attempts - 1
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND m.claimed_by = %(relay)s
  AND m.status = %(pending)s
RETURNING m.id
"""

# Record outcomes: delivered, or failed (retry after a delay, or dead-letter when the
# attempts are used up or the failure is permanent). Returns what was recorded.
SETTLE = """
UPDATE outbox_message_t m
SET status = CASE
        WHEN o.delivered THEN %(delivered)s
        WHEN o.permanent OR m.attempts >= %(max_attempts)s THEN %(dead)s
        ELSE %(pending)s END,
    delivered_ts = CASE WHEN o.delivered THEN clock_timestamp() END,
    next_attempt_ts = CASE
        WHEN o.delivered OR o.permanent OR m.attempts >= %(max_attempts)s THEN NULL
        ELSE clock_timestamp() + make_interval(secs => o.delay) END,
    last_error = CASE WHEN o.delivered THEN m.last_error ELSE o.error END,
    claimed_by = '',
    claimed_until = NULL
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(delivered_flags)s::bool[],
            %(permanent_flags)s::bool[], %(errors)s::text[], %(delays)s::float8[])
     AS o(id, attempts, delivered, permanent, error, delay)
WHERE m.id = o.id AND m.attempts = o.attempts AND m.claimed_by = %(relay)s
  AND m.status = %(pending)s
RETURNING m.id, m.status, m.next_attempt_ts
"""

# Seconds (database clock) until the next message becomes claimable; None if none is pending.
NEXT_CLAIMABLE = """
SELECT extract(epoch FROM min(GREATEST(next_attempt_ts, claimed_until, statement_timestamp()))
                      - clock_timestamp())
FROM outbox_message_t
WHERE status = %(pending)s
  AND (%(topics)s::text[] IS NULL OR topic = ANY(%(topics)s::text[]))
"""


@dataclass(frozen=True, slots=True)
class Message:
    """One claimed outbox message, as transports see it."""

    id: uuid.UUID
    topic: str
    event_type: str
    payload: dict[str, Any]
    attempt: int
    priority: int = 0
    event_ts: datetime | None = None


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    message: Message
    error: str = ""
    permanent: bool = False
    delay: float = 0.0

    @property
    def delivered(self) -> bool:
        return not self.error


@dataclass(frozen=True, slots=True)
class Settled:
    id: uuid.UUID
    status: str
    next_attempt_ts: datetime | None


@dataclass(frozen=True, slots=True)
class Claimer:
    """Who claims, and the claim's rules."""

    relay_id: str
    visibility_timeout: float
    max_attempts: int
    topics: Sequence[str] | None = None


def _statuses() -> dict[str, str]:
    return {
        "pending": DeliveryStatus.PENDING.value,
        "delivered": DeliveryStatus.DELIVERED.value,
        "dead": DeliveryStatus.DELIVERY_FAILED.value,
    }


def claim(cursor: Any, claimer: Claimer, limit: int) -> tuple[list[Message], list[Message]]:
    """Claim up to ``limit`` messages; return (to deliver, dead-lettered at claim)."""
    cursor.execute(
        CLAIM,
        {
            **_statuses(),
            "relay": claimer.relay_id,
            "visibility": claimer.visibility_timeout,
            "max_attempts": claimer.max_attempts,
            "topics": list(claimer.topics) if claimer.topics else None,
            "limit": limit,
        },
    )
    live: list[Message] = []
    dead: list[Message] = []
    for id_, topic, event_type, payload, attempts, priority, event_ts, status in sorted(
        cursor.fetchall(), key=lambda row: (-row[5], row[6], row[0])
    ):
        if isinstance(payload, str | bytes):  # Django's psycopg setup leaves jsonb undecoded
            payload = json.loads(payload)
        message = Message(id_, topic, event_type, payload, attempts, priority, event_ts)
        (live if status == DeliveryStatus.PENDING else dead).append(message)
    return live, dead


def _tokens(messages: Sequence[Message]) -> dict[str, Any]:
    return {"ids": [m.id for m in messages], "attempts": [m.attempt for m in messages]}


def extend(cursor: Any, claimer: Claimer, messages: Sequence[Message]) -> set[uuid.UUID]:
    """Push the claim's expiry out again; return the ids this relay still holds."""
    if not messages:
        return set()
    cursor.execute(
        EXTEND,
        {
            **_statuses(),
            **_tokens(messages),
            "relay": claimer.relay_id,
            "visibility": claimer.visibility_timeout,
        },
    )
    return {row[0] for row in cursor.fetchall()}


def release(cursor: Any, claimer: Claimer, messages: Sequence[Message]) -> int:
    """Give unattempted claims back; return how many were still ours."""
    if not messages:
        return 0
    cursor.execute(RELEASE, {**_statuses(), **_tokens(messages), "relay": claimer.relay_id})
    return len(cursor.fetchall())


def settle(cursor: Any, claimer: Claimer, outcomes: Sequence[DeliveryOutcome]) -> list[Settled]:
    """Record outcomes of this relay's claims; outcomes of lost claims are not written."""
    if not outcomes:
        return []
    cursor.execute(
        SETTLE,
        {
            **_statuses(),
            **_tokens([o.message for o in outcomes]),
            "relay": claimer.relay_id,
            "max_attempts": claimer.max_attempts,
            "delivered_flags": [o.delivered for o in outcomes],
            "permanent_flags": [o.permanent for o in outcomes],
            "errors": [o.error[:ERROR_MAX_CHARS] for o in outcomes],
            "delays": [o.delay for o in outcomes],
        },
    )
    return [Settled(*row) for row in cursor.fetchall()]


def seconds_until_claimable(cursor: Any, topics: Sequence[str] | None = None) -> float | None:
    """Seconds until the next pending message may be claimed (≤ 0: now); None if none."""
    cursor.execute(
        NEXT_CLAIMABLE, {"pending": DeliveryStatus.PENDING.value, "topics": topics or None}
    )
    (delay,) = cursor.fetchone()
    return None if delay is None else float(delay)
