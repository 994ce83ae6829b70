"""Keeping claims and giving them back: a batch's renewal (``EXTEND``: the relay's claim
heartbeat, a batch claimed ahead and held long) and a stopping relay's release (``RELEASE``).

Each is one statement for the whole batch, fenced on ``(claimed_by, attempts)``
(:data:`~.claims.FENCE`): a claim another relay took over is neither renewed nor given back.
A row the database refuses to write (a CHECK ... NOT VALID, a trigger) would fail the
statement for every claim of the batch; it is narrowed down to that row instead
(:func:`.refused.narrowed`), which is neither renewed (so not sent: it may expire and be
claimed again) nor given back (it expires), and the others are written.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections

from django_dsched.outbox.claims import FENCE, Claimer, Message, statuses
from django_dsched.outbox.refused import narrowed

# Keep a claim alive during a long batch; returns the ids still ours. The message whose run is
# under way (%(running)s, if any, run by the relay itself) gets its start time, %(running_for)s
# seconds ago by the relay's monotonic clock, unless it has one.
EXTEND = f"""
UPDATE outbox_message_t m
SET claimed_until = clock_timestamp() + make_interval(secs => %(visibility)s),
    started_ts = CASE WHEN m.id = ANY(%(running)s::uuid[])
                      THEN COALESCE(m.started_ts,
                                    clock_timestamp() - make_interval(secs => %(running_for)s))
                      ELSE m.started_ts END
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND {FENCE}
RETURNING m.id
"""

# Give back claims not attempted (a relay stopping gracefully): claimable again at once, and
# the unused attempt is not counted.
RELEASE = f"""
UPDATE outbox_message_t m
SET claimed_by = '', claimed_until = NULL, attempts = m.attempts - 1, picked_ts = NULL,
    started_ts = NULL
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS c(id, attempts)
WHERE m.id = c.id AND m.attempts = c.attempts AND {FENCE}
RETURNING m.id
"""


def _written(
    using: str, statement: str, params: dict[str, Any], messages: Sequence[Message]
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """``statement`` over the claims of ``messages`` on connection ``using``, narrowed to the
    rows the database refuses: the ids it wrote, and the refused messages with the error."""

    def run(part: list[Message]) -> list[uuid.UUID]:
        tokens: dict[str, Any] = {
            "ids": [m.id for m in part],
            "attempts": [m.attempt for m in part],
        }
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
    running: Sequence[uuid.UUID] = (),
    running_for: float = 0.0,
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """Push the claims' expiry out again: the ids this relay still holds, and the messages
    the database refused to renew (each with its error; not held either).

    ``running``: messages the relay is running now, for ``running_for`` seconds (their
    ``started_ts`` is set if not yet).
    """
    params = {
        **statuses(),
        "relay": claimer.relay_id,
        "visibility": claimer.visibility_timeout,
        "running": list(running),
        "running_for": max(0.0, running_for),
    }
    return _written(using, EXTEND, params, messages)


def release(
    using: str, claimer: Claimer, messages: Sequence[Message]
) -> tuple[set[uuid.UUID], list[tuple[Message, str]]]:
    """Give unattempted claims back: the ids that were still ours, and the messages the
    database refused to release (each with its error; they expire)."""
    return _written(using, RELEASE, {**statuses(), "relay": claimer.relay_id}, messages)
