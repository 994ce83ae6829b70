"""Keeping claims and giving them back: a batch's renewal (``EXTEND``: the relay's claim
heartbeat, a batch claimed ahead and held long) and a stopping relay's release (``RELEASE``).

Each is one statement for the whole batch, fenced on ``(claimed_by, attempts)``
(:data:`~.settling.FENCE`): a claim another relay took over is neither renewed nor given back.
A row the database refuses to write (a CHECK ... NOT VALID, a trigger) would fail the
statement for every claim of the batch; it is narrowed down to that row instead
(:func:`.refused.narrowed`), which is neither renewed (so not sent: it may expire and be
claimed again) nor given back (it expires), and the others are written.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections

from django_dsched.outbox.claims import statuses
from django_dsched.outbox.messages import Claimer, Message
from django_dsched.outbox.refused import narrowed
from django_dsched.outbox.settling import FENCE, id_range

# Keep claims alive while the relay holds them; returns the ids still ours. A message whose
# run is under way (its ``ago`` not NULL: run by the relay itself, started that many seconds
# ago by the relay's monotonic clock) gets its start time unless it has one.
EXTEND = f"""
UPDATE outbox_message_t m
SET claimed_until = clock_timestamp() + make_interval(secs => %(visibility)s),
    started_ts = CASE WHEN c.ago IS NULL THEN m.started_ts
                      ELSE COALESCE(m.started_ts,
                                    clock_timestamp() - make_interval(secs => c.ago)) END
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(ago)s::float8[]) AS c(id, attempts, ago)
WHERE m.id = c.id AND m.attempts = c.attempts AND {FENCE}
RETURNING m.id
"""

# Give back claims not attempted (a relay stopping gracefully, or holding more than it can
# send soon): claimable again at once, and the unused attempt is not counted.
RELEASE = f"""
UPDATE outbox_message_t m
SET claimed_by = '', claimed_until = NULL, attempts = m.attempts - 1, picked_ts = NULL,
    started_ts = NULL
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND {FENCE}
RETURNING m.id
"""

# Give back claims of a destination whose circuit is open (outbox/breaker.py), not attempted:
# claimable again once the circuit's time is over (%(delay)s seconds), the attempt not
# counted, and the reason in last_error.
DEFER = f"""
UPDATE outbox_message_t m
SET claimed_by = '', claimed_until = NULL, attempts = m.attempts - 1, picked_ts = NULL,
    started_ts = NULL,
    next_attempt_ts = clock_timestamp() + make_interval(secs => %(delay)s),
    last_error = %(note)s
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND {FENCE}
RETURNING m.id
"""


def _written(
    using: str,
    statement: str,
    params: dict[str, Any],
    messages: Sequence[Message],
    ago: Mapping[uuid.UUID, float] | None = None,
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """``statement`` over the claims of ``messages`` on connection ``using``, narrowed to the
    rows the database refuses: the ids it wrote, and the refused messages with the error.
    ``ago``: for EXTEND, how long ago each message's run started (the others: not running)."""

    def run(part: list[Message]) -> list[uuid.UUID]:
        tokens: dict[str, Any] = {
            **id_range(m.id for m in part),
            "ids": [m.id for m in part],
            "attempts": [m.attempt for m in part],
        }
        if ago is not None:
            tokens["ago"] = [ago.get(m.id) for m in part]
        with connections[using].cursor() as cursor:
            cursor.execute(statement, {**params, **tokens})
            return [row[0] for row in cursor.fetchall()]

    if not messages:
        return set(), []
    done, refused = narrowed(using, run, list(messages))
    return set(done), refused


def extend(
    using: str,
    claimer: Claimer,
    messages: Sequence[Message],
    running: Mapping[uuid.UUID, float] | None = None,
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """Push the claims' expiry out again: the ids this relay still holds, and the messages
    the database refused to renew (each with its error; not held either).

    ``running``: the messages the relay is running now, each with how many seconds ago its
    run started (their ``started_ts`` is set if not yet).
    """
    params = {**statuses(), "relay": claimer.relay_id, "visibility": claimer.visibility_timeout}
    return _written(using, EXTEND, params, messages, running or {})


def release(
    using: str, claimer: Claimer, messages: Sequence[Message]
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """Give unattempted claims back: the ids that were still ours, and the messages the
    database refused to release (each with its error; they expire)."""
    return _written(using, RELEASE, {**statuses(), "relay": claimer.relay_id}, messages)


def defer(
    using: str, claimer: Claimer, messages: Sequence[Message], seconds: float, note: str
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """Give claims of an open circuit back until it ends (``seconds``), the attempt not
    counted, ``note`` as the last error: the ids given back, and the messages the database
    refused (each with its error; they expire)."""
    params = {**statuses(), "relay": claimer.relay_id, "delay": seconds, "note": note}
    return _written(using, DEFER, params, messages)
