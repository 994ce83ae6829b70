"""Settle a relay's claims: record each message's outcome (delivered, retried, dead-lettered)
in one statement for the batch, fenced on the claim (extending and releasing claims:
:mod:`.holding`; claiming: :mod:`.claims`).

``(claimed_by, attempts)`` is the claim's fencing token: a write names both, so a relay whose
claim expired and was taken over cannot overwrite the newer claim's outcome. A write names the
range of the ids it writes too, as values, so that PostgreSQL plans only their days
(:func:`.claims.in_range`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django_dsched.history.partitions import whole_days
from django_dsched.models.validators import make_storable_text
from django_dsched.outbox import run_health
from django_dsched.outbox.claims import ERROR_MAX_CHARS, in_range, statuses
from django_dsched.outbox.messages import Claimer, DeliveryOutcome, Settled
from django_dsched.runtime.arrays import array_literal, repeated_array_literal

# The claim's fence on the rows a write names (``m``): still this relay's and pending. The
# values come through one-row subqueries so the planner does not estimate the rows from the
# column statistics: ``claimed_by`` is '' in nearly every row ANALYZE saw, so a constant relay
# id reads as "about one row", and a batch of 1,000 outcomes was joined to a sequential scan
# of the table in a nested loop (a million comparisons, 200 ms a settle); with the fence
# unknown to the planner it probes the primary key or hashes, at any batch size. The range
# of the ids the write names (:func:`id_range`), as values: only their days are planned.
FENCE = (
    "m.claimed_by = (SELECT %(relay)s::text) AND m.status = (SELECT %(pending)s::text)"
    f" AND {in_range('m')}"
)


def id_range(ids: Iterable[uuid.UUID]) -> dict[str, uuid.UUID]:
    """The ``low`` and ``high`` of :func:`in_range` for a write naming ``ids`` (at least one):
    their days (:func:`.partitions.whole_days`; PostgreSQL orders uuids as Python does, by
    their bytes)."""
    listed = list(ids)
    low, high = whole_days(min(listed), max(listed))
    return {"low": low, "high": high}


# Record outcomes: delivered, or failed (retry after a delay, or dead-letter when the
# attempts are used up or the failure is permanent). Returns a row for each outcome the
# relay has to look at: one recorded as anything but delivered (retried or dead-lettered),
# one not recorded (its claim was lost: status NULL), and, when %(times)s, each delivered
# one with its time (for the metrics' latencies); a delivered outcome is otherwise not
# returned, so that the relay reads nothing back for a batch that went through. The arrays
# come as text literals (:mod:`django_dsched.runtime.arrays`), one parameter each, parsed
# by the server in C: a list bound element by element costs the relay microseconds per
# element. A delivered outcome has no error (NULL); when every outcome of the batch is
# delivered the error, permanent and delay arrays are NULL, which ``unnest`` pads out. The
# same statement keeps the schedules' runs in a row (:mod:`.run_health`, schedule health).
SETTLE = f"""
WITH settled AS (
UPDATE outbox_message_t m
SET status = CASE
        WHEN o.error IS NULL THEN %(delivered)s
        WHEN o.permanent OR m.attempts >= %(max_attempts)s THEN %(dead)s
        ELSE %(pending)s END,
    delivered_ts = CASE WHEN o.error IS NULL THEN clock_timestamp() END,
    next_attempt_ts = CASE
        WHEN o.error IS NULL OR o.permanent OR m.attempts >= %(max_attempts)s THEN NULL
        ELSE clock_timestamp() + make_interval(secs => o.delay) END,
    last_error = COALESCE(o.error, m.last_error),
    claimed_by = '',
    claimed_until = NULL,
    -- Phases, from the relay's monotonic clock: started and ended that many seconds ago. A
    -- message handed off to a worker (started_ago NULL) keeps what the worker reports.
    started_ts = CASE WHEN o.started_ago IS NULL THEN m.started_ts
                      ELSE clock_timestamp() - make_interval(secs => o.started_ago) END,
    completed_ts = CASE WHEN o.error IS NULL AND o.started_ago IS NOT NULL
                        THEN clock_timestamp() - make_interval(secs => o.ended_ago)
                        ELSE m.completed_ts END,
    failed_ts = CASE WHEN o.error IS NULL THEN m.failed_ts
                     ELSE clock_timestamp() - make_interval(secs => o.ended_ago) END
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(started_ago)s::float8[],
            %(ended_ago)s::float8[], %(errors)s::text[], %(permanent_flags)s::bool[],
            %(delays)s::float8[])
     AS o(id, attempts, started_ago, ended_ago, error, permanent, delay)
WHERE m.id = o.id AND m.attempts = o.attempts AND {FENCE}
RETURNING m.id, m.status, m.next_attempt_ts, m.delivered_ts, {run_health.OUTCOME}
),{run_health.after_settle("settled")}
SELECT id, status, next_attempt_ts, delivered_ts FROM settled
WHERE %(times)s OR status <> %(delivered)s
UNION ALL
SELECT o.id, NULL, NULL, NULL FROM unnest(%(ids)s::uuid[]) AS o(id)
WHERE NOT EXISTS (SELECT FROM settled s WHERE s.id = o.id)
"""


def settle(
    cursor: Any,
    claimer: Claimer,
    outcomes: Sequence[DeliveryOutcome],
    *,
    times: bool = False,
) -> list[Settled]:
    """Record outcomes of this relay's claims; outcomes of lost claims are not written.

    Returns what the relay has to look at (:data:`SETTLE`): each outcome recorded as retried
    or dead-lettered, each one not recorded (its claim lost: ``status`` None), and, with
    ``times``, each delivered one with its ``delivered_ts``; an outcome not returned was
    recorded as delivered.

    Errors come from outside (endpoints, transports, handlers): each is made storable (no
    NUL, no lone surrogate, at most ``ERROR_MAX_CHARS``) so that no error text can make the
    statement fail. One statement for the whole batch: if a row refuses its outcome for
    another reason, the statement fails as a whole (``outbox.outcomes`` records the batch
    outcome by outcome then).
    """
    if not outcomes:
        return []
    now = time.monotonic()
    failed = [o for o in outcomes if o.error]
    cursor.execute(
        SETTLE,
        {
            **statuses(),
            **id_range(o.message.id for o in outcomes),
            "ids": array_literal(o.message.id for o in outcomes),
            "attempts": array_literal(o.message.attempt for o in outcomes),
            "relay": claimer.relay_id,
            "max_attempts": claimer.max_attempts,
            "started_ago": repeated_array_literal(
                None if o.started is None else now - o.started for o in outcomes
            ),
            "ended_ago": repeated_array_literal(
                0.0 if o.ended is None else now - o.ended for o in outcomes
            ),
            # Rarely any: bound as lists (the errors need quoting), NULL when none failed.
            "errors": [
                make_storable_text(o.error, ERROR_MAX_CHARS) if o.error else None for o in outcomes
            ]
            if failed
            else None,
            "permanent_flags": [o.permanent for o in outcomes] if failed else None,
            "delays": [float(o.delay) for o in outcomes] if failed else None,
            "times": times,
        },
    )
    return [Settled(*row) for row in cursor.fetchall()]
