"""Claim and settle outbox messages: the relay's raw SQL (extending and releasing claims:
:mod:`.holding`; finding the rows the database refuses to claim: :mod:`.refused`).

A message is *claimable* when it is PENDING, its next attempt is due and nobody holds an
unexpired claim on it (``claimed_until``, the visibility timeout): when the time it becomes
available, ``GREATEST(event_ts, next_attempt_ts, claimed_until)``, has passed. A claim is one
statement (``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``) that stamps the
claimer, the claim's expiry and the attempt number, so two relays never hold the same message
at once. Before it, the claim reads the range of the pending messages' ids, which it names so
that only the days between them are planned (:func:`in_range`).

The claim reads only claimable rows, however many wait on a backoff or a claim: the index
``dsched_outbox_ready_idx`` is keyed on ``(priority DESC, GREATEST(...))`` over pending rows,
so within one priority the claimable rows are a range at the front. The statement visits the
priorities present (one index probe each, a "skip scan" written as a recursive CTE) and reads
each one's range until the batch is full. A batch is also capped in bytes of payload
(``max_bytes``; always at least one message), so a relay's memory does not grow with the
batch size times the largest event.

A backlog never starves on-time work: within each priority the claim takes first the rows
that became claimable since this relay's previous claim that found rows (that claim's
database time, kept by the relay, less ``ON_TIME_WINDOW`` for messages committed after it:
``since``): a new message, a retry whose backoff ended, a message whose claim expired; then
the older ones (the backlog). Each is a range of the index (``> since`` and ``<= since``).
While a priority has a backlog, on-time rows take at most ``limit - share`` of the batch, so
the backlog drains at a tenth of the batch at least, and at the batch's full rate when
nothing is on time.

No tenant's backlog waits behind another's: the backlog is taken host by host, an equal
share of the batch each (oldest first within a host), from the hosts that have one at that
priority (a skip scan of ``dsched_outbox_host_ready_idx``, ``(priority DESC, host_id,
GREATEST(...))``, asked only at a priority that has a backlog), the hosts in a turn that
moves by one each claim. And a relay passes over the messages of the destinations it holds
enough of, or whose circuit is open (``held_back``, ``host topic`` pairs: :mod:`.dispatch`).

``(claimed_by, attempts)`` is the claim's fencing token: every claim bumps ``attempts``, and
every later write for that claim (extend, release, outcome) matches both, so a relay whose
claim expired and was taken over cannot overwrite the newer claim's outcome.

All times are the database's (``statement_timestamp()``, ``clock_timestamp()``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from django_dsched.enums import DeliveryStatus
from django_dsched.history.partitions import whole_days
from django_dsched.models import envelope
from django_dsched.models import outbox as outbox_model
from django_dsched.models.times import OUT_OF_RANGE, readable, storable
from django_dsched.outbox.messages import Claimed, Claimer, Message
from django_dsched.runtime.loops import bound_transaction, hold_bounds

# Longest error text stored per message.
ERROR_MAX_CHARS = 2000

# When a pending message becomes claimable: its fire, the end of its backoff, the end of the
# current claim, whichever is last (GREATEST ignores NULLs). It must read exactly as in the
# index dsched_outbox_ready_idx (models/outbox.py) for PostgreSQL to use the index.
AVAILABLE_TS = "GREATEST(o.event_ts, o.next_attempt_ts, o.claimed_until)"

# A claim names the range of the pending messages' ids, ``%(low)s`` to ``%(high)s`` (read
# just before: :func:`pending_ids`), in each of its scans and in its payload's probe of
# event_store_t. Given as values, the range lets PostgreSQL plan only the day partitions
# between the oldest and the newest pending message (history/partitions.py: by id); it is
# widened to those whole days, so the planner never takes it for a selective condition
# (history/partitions.whole_days).
# Unbounded, each of a claim's eleven scans of outbox_message_t was planned over every day
# kept: 45 days of history (the default retention) and the week made ahead made the
# planning cost more than the claim, and halved a relay's rate.


def in_range(alias: str) -> str:
    """SQL: the row ``alias``'s id is within ``%(low)s`` and ``%(high)s``, given as values, so
    that PostgreSQL plans only the day partitions of that range (history/partitions.py)."""
    return f"{alias}.id >= %(low)s::uuid AND {alias}.id <= %(high)s::uuid"


# A pending message within the range.
PENDING_IN_RANGE = f"o.status = %(pending)s AND {in_range('o')}"
# The range (NULLs: nothing is pending), from a function planned once per session
# (models/outbox.py).
PENDING_IDS = f"SELECT low, high FROM {outbox_model.PENDING_IDS}()"
# The whole range of ids: for the statements that read the pending messages with no range at
# hand (the gauges, benchmarks).
ALL_IDS = {"low": uuid.UUID(int=0), "high": uuid.UUID(int=(1 << 128) - 1)}

# The distinct priorities of pending messages, highest first: one index probe each, read
# lazily (the claim stops asking once its batch is full).
PRIORITIES = f"""
RECURSIVE levels(priority) AS (
    (SELECT o.priority FROM outbox_message_t o
     WHERE {PENDING_IN_RANGE} ORDER BY o.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT o.priority FROM outbox_message_t o
            WHERE {PENDING_IN_RANGE} AND o.priority < l.priority
            ORDER BY o.priority DESC LIMIT 1)
    FROM levels l
    WHERE l.priority IS NOT NULL
)"""

TOPICS = "(%(topics)s::text[] IS NULL OR o.topic = ANY(%(topics)s::text[]))"

# The payload a claimed message delivers (``c``: the locked row): its event's envelope,
# composed from the event's columns (models/envelope.py), one primary-key probe by the shared
# id (within the claim's range, so that only its days are planned: in_range).
# NULL only if the event was deleted by hand (retention keeps it while the message exists):
# such a message is dead-lettered at claim.
PAYLOAD = f"(SELECT {envelope.sql('e')} FROM event_store_t e WHERE e.id = c.id AND {in_range('e')})"
# Dead-lettered at claim: claimed max_attempts times with no outcome, nothing to deliver, or
# a time no reader can read (outside the years 1 to 9999: models/times.py).
DEAD_AT_CLAIM = (
    f"(m.attempts >= %(max_attempts)s OR l.body IS NULL OR NOT {readable('m.event_ts')})"
)

# How far before the relay's previous claim on-time work starts (seconds). A message is
# claimable from its event_ts, the time of the statement that wrote it, but visible only once
# that transaction commits: a fire batch committed just after a claim holds messages claimable
# "before" it, which would otherwise join the backlog. It also keeps on time, for this long,
# on-time messages a full batch left over.
ON_TIME_WINDOW = 1.0

# Where on-time work starts: ON_TIME_WINDOW (%(window)s) before this relay's previous claim
# that found rows (its database time in microseconds since the epoch, %(since)s), or before
# now for the first claim of a process. Rows claimable after it are on time; rows claimable by
# then are the backlog.
SINCE = """COALESCE('epoch'::timestamptz + %(since)s::bigint * interval '1 microsecond',
                  statement_timestamp()) - make_interval(secs => %(window)s)"""

# Whether this priority (``l``) keeps the backlog's share: only if its on-time rows would
# fill more than the batch less the share (true if the on-time range has a row past that many,
# else NULL) and it has a backlog (true if the backlog's range has a first row). Both are read
# from the index in its order, never scanned for; the backlog's is asked only if the on-time
# rows are that many, so a round of a draining backlog does not read its front twice.
CROWDED = f"""(SELECT true FROM outbox_message_t o
                    WHERE {PENDING_IN_RANGE} AND o.priority = l.priority
                      AND {AVAILABLE_TS} > (SELECT ts FROM since)
                      AND {AVAILABLE_TS} <= statement_timestamp() AND {TOPICS}
                    ORDER BY {AVAILABLE_TS} OFFSET %(on_time)s LIMIT 1)"""
BEHIND = f"""(SELECT true FROM outbox_message_t o
                    WHERE {PENDING_IN_RANGE} AND o.priority = l.priority
                      AND {AVAILABLE_TS} <= (SELECT ts FROM since) AND {TOPICS}
                    ORDER BY {AVAILABLE_TS} LIMIT 1)"""

# Messages the relay's quarantine passes over for a while (outbox/quarantine.py).
NOT_SKIPPED = "\n                AND o.id <> ALL(%(skip)s::uuid[])"
# Messages of the destinations the relay passes over (``host topic``: outbox/dispatch.py).
NOT_HELD = "\n                AND (o.host_id::text || ' ' || o.topic) <> ALL(%(held)s::text[])"


def _filters(skip: bool, held: bool) -> str:
    return (NOT_SKIPPED if skip else "") + (NOT_HELD if held else "")


# One host's rows are asked as ``host_id >= h AND host_id <= h``, ordered by host then time:
# with ``host_id = h`` the planner may walk the ready index (ordered by time alone) filtering
# on the host, expecting the host's rows anywhere, and read through another tenant's whole
# backlog to find them; a range it cannot take for one value, with the host in the order,
# leaves it the host ready index.

# The hosts with a backlog at each priority that has one (``BEHIND`` at ``l``), by a skip scan
# of dsched_outbox_host_ready_idx (one probe a host with pending messages there), each with
# its turn in this claim (the turn moves by %(rotate)s, one a claim) and the count of hosts.
TENANTS = f"""
tenants(priority, host_id) AS (
    SELECT l.priority, (SELECT o.host_id FROM outbox_message_t o
                        WHERE {PENDING_IN_RANGE} AND o.priority = l.priority
                        ORDER BY o.host_id LIMIT 1)
    FROM levels l
    WHERE l.priority IS NOT NULL AND {"{BEHIND}"}
    UNION ALL
    SELECT t.priority, (SELECT o.host_id FROM outbox_message_t o
                        WHERE {PENDING_IN_RANGE} AND o.priority = t.priority
                          AND o.host_id > t.host_id
                        ORDER BY o.host_id LIMIT 1)
    FROM tenants t
    WHERE t.host_id IS NOT NULL
),
behind AS MATERIALIZED (
    SELECT priority, host_id,
           (row_number() OVER w - 1 + %(rotate)s) %% count(*) OVER w AS turn,
           count(*) OVER w AS hosts
    FROM tenants t
    -- Whether the host has a backlog: the first entry of its range (not EXISTS, which the
    -- planner would answer by hashing every pending row); the host as a range (above).
    WHERE t.host_id IS NOT NULL AND (
        SELECT true FROM outbox_message_t o
        WHERE {PENDING_IN_RANGE} AND o.priority = t.priority
          AND o.host_id >= t.host_id AND o.host_id <= t.host_id
          AND {AVAILABLE_TS} <= (SELECT ts FROM since) AND {TOPICS}
        ORDER BY o.host_id, {AVAILABLE_TS} LIMIT 1)
    WINDOW w AS (PARTITION BY priority ORDER BY host_id
                 ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
)"""


def chosen(skip: bool = False, held: bool = False) -> str:
    """The claim's choice: the CTEs ``locked`` (the rows taken, locked) and ``candidates``
    (those within the byte cap, with their order); ``skip``: passing over ``%(skip)s``;
    ``held``: passing over the destinations ``%(held)s``."""
    filters = _filters(skip, held)
    behind_at_l = BEHIND.replace("\n", " ")
    return f"""
WITH {PRIORITIES},
since AS MATERIALIZED (SELECT {SINCE} AS ts),
{TENANTS.replace("{BEHIND}", behind_at_l)},
-- Per priority, two parts (``r``): first the rows claimable since this relay's previous
-- claim (part 0: on time; while the priority has a backlog, no more than the batch less the
-- backlog's share), one range of the ready index in the order they became claimable, so
-- rows waiting on a backoff or a live claim are never read; then the older ones (part 1: the
-- backlog), host by host in turn (``behind``), an equal share of the batch each, oldest
-- first, each a range of the host ready index. Each locked row's payload is turned into text
-- once: its length is what the byte cap counts, the text what is returned. The payload is
-- its event's, one primary-key probe of event_store_t by the shared id.
locked AS (
    SELECT x.*, octet_length(x.body) AS bytes
    FROM (SELECT c.id, c.priority, c.available_ts, {PAYLOAD}::text AS body, r.part, c.turn
          FROM levels l
          CROSS JOIN LATERAL (VALUES
              (0, CASE WHEN {CROWDED} IS NULL THEN %(limit)s
                       WHEN {BEHIND} THEN %(on_time)s ELSE %(limit)s END),
              (1, %(limit)s)
          ) r(part, most)
          CROSS JOIN LATERAL (
              SELECT * FROM (
                  SELECT o.id, o.priority, {AVAILABLE_TS} AS available_ts, 0::bigint AS turn
                  FROM outbox_message_t o
                  WHERE r.part = 0 AND {PENDING_IN_RANGE} AND o.priority = l.priority
                    AND {AVAILABLE_TS} > (SELECT ts FROM since)
                    AND {AVAILABLE_TS} <= statement_timestamp()
                    AND {TOPICS}{filters}
                  ORDER BY {AVAILABLE_TS}
                  LIMIT r.most
                  FOR UPDATE OF o SKIP LOCKED) on_time
              UNION ALL
              SELECT h.* FROM (
                  SELECT * FROM behind b
                  WHERE r.part = 1 AND b.priority = l.priority ORDER BY b.turn) b
              CROSS JOIN LATERAL (
                  SELECT o.id, o.priority, {AVAILABLE_TS} AS available_ts, b.turn
                  FROM outbox_message_t o
                  WHERE {PENDING_IN_RANGE} AND o.priority = l.priority
                    AND o.host_id >= b.host_id AND o.host_id <= b.host_id
                    AND {AVAILABLE_TS} <= (SELECT ts FROM since)
                    AND {TOPICS}{filters}
                  ORDER BY o.host_id, {AVAILABLE_TS}
                  LIMIT (%(limit)s + b.hosts - 1) / b.hosts
                  FOR UPDATE OF o SKIP LOCKED) h
          ) c
          LIMIT %(limit)s) x
),
-- The batch: the prefix of those within max_bytes of payload (JSON text), at least one, in
-- an order that spreads the backlog's share through each priority (``spread``: the share's
-- backlog rows to every batch-less-share on-time ones, the first after the first on-time
-- one; the backlog's rows a host at a time in turn: each host's first, then each one's
-- second, ...), so a byte cap keeps that share too, and each host's. ``n``: the order of
-- delivery, on time first.
candidates AS (
    SELECT id, row_number() OVER (ORDER BY priority DESC, part, rank, turn, available_ts, id)
               AS n,
           bytes
    FROM (SELECT id, priority, part, available_ts, bytes, rank, turn,
                 row_number() OVER w AS k, sum(bytes) OVER w AS running
          FROM (SELECT *, (row_number() OVER (PARTITION BY priority, part
                                              ORDER BY rank, turn, available_ts, id) - 1)
                          * CASE part WHEN 0 THEN %(share)s ELSE %(on_time)s END AS spread
                FROM (SELECT *, CASE part WHEN 0 THEN 0 ELSE
                                    row_number() OVER (PARTITION BY priority, part, turn
                                                       ORDER BY available_ts, id) END AS rank
                      FROM locked) ranked) p
          WINDOW w AS (ORDER BY priority DESC, spread, part, rank, turn, available_ts, id
                       ROWS UNBOUNDED PRECEDING)) s
    WHERE k = 1 OR %(max_bytes)s::bigint IS NULL OR running <= %(max_bytes)s::bigint
)"""


# What a claim writes to each row it takes (``m``; ``l.body``: its payload as text).
CLAIM_SET = f"""
SET attempts = CASE WHEN {DEAD_AT_CLAIM} THEN m.attempts ELSE m.attempts + 1 END,
    claimed_by = CASE WHEN {DEAD_AT_CLAIM} THEN '' ELSE %(relay)s END,
    claimed_until = CASE WHEN {DEAD_AT_CLAIM} THEN NULL
                         ELSE clock_timestamp() + make_interval(secs => %(visibility)s) END,
    -- Claimed max_attempts times with no outcome recorded (each claimer died or hung), its
    -- payload gone, or its time one no reader can read: dead-letter it here rather than
    -- let it crash one more relay (its time made storable, what it held in its error).
    status = CASE WHEN {DEAD_AT_CLAIM} THEN %(dead)s ELSE m.status END,
    last_error = CASE WHEN l.body IS NULL
                      THEN 'no payload to deliver: its event (the same id) was deleted'
                           || ' from event_store_t'
                      WHEN NOT {readable("m.event_ts")}
                      THEN 'its time (event_ts) held ' || m.event_ts::text || ', {OUT_OF_RANGE}:'
                           || ' no reader can read it (written by hand or before the CHECK'
                           || ' dsched_outbox_times_in_range); dead-lettered at its claim'
                      WHEN m.attempts >= %(max_attempts)s
                      THEN 'claimed ' || m.attempts || ' times without a recorded outcome'
                           || ' (the relays holding it died or hung). Last error: '
                           || m.last_error
                      ELSE m.last_error END,
    -- Phases: a claim starts a new attempt (picked now, nothing started or finished yet).
    picked_ts = CASE WHEN {DEAD_AT_CLAIM} THEN m.picked_ts ELSE clock_timestamp() END,
    started_ts = CASE WHEN {DEAD_AT_CLAIM} THEN m.started_ts END,
    completed_ts = NULL,
    failed_ts = CASE WHEN {DEAD_AT_CLAIM} THEN clock_timestamp() END,
    event_ts = {storable("m.event_ts", nullable=False)}"""
# What it returns (``c``: the row's order and bytes); last, how long the message had been
# claimable (seconds since its fire or the end of its backoff, whichever is later).
CLAIM_RETURNING = """RETURNING m.id, m.topic, m.event_type, l.body, m.attempts, m.priority,
          m.status, c.n, c.bytes,
          (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
          m.host_id, CASE WHEN m.status = %(dead)s THEN m.last_error END,
          extract(epoch FROM statement_timestamp()
                             - GREATEST(m.event_ts, m.next_attempt_ts))::float8"""


def claim_statement(skip: bool = False, held: bool = False) -> str:
    """The claim (``skip``: passing over the quarantined ids; ``held``: over the destinations
    the relay holds enough of)."""
    return f"""{chosen(skip, held)}
UPDATE outbox_message_t m
{CLAIM_SET}
FROM candidates c
JOIN locked l ON l.id = c.id
-- Each partition's rows by primary key, joined to the candidates (an id = ANY(array) here
-- had each day's partition read whole by a sequential scan).
WHERE m.id = c.id AND {in_range("m")}
{CLAIM_RETURNING}
"""


CLAIMS = {
    (skip, held): claim_statement(skip, held) for skip in (False, True) for held in (False, True)
}
CLAIM = CLAIMS[False, False]

# The least part of a batch the backlog gets while on-time work would fill it.
BACKLOG_SHARE = 0.1

# Seconds (database clock) until the next message becomes claimable, looking no further than
# %(within)s seconds ahead; None if none does. Per priority, the first row of the same index
# range, so rows claimable only later than that are never read.
NEXT_CLAIMABLES = {
    (skip, held): f"""
WITH {PRIORITIES}
SELECT extract(epoch FROM min(n.available_ts) - clock_timestamp())
FROM levels l
CROSS JOIN LATERAL (
    SELECT {AVAILABLE_TS} AS available_ts
    FROM outbox_message_t o
    WHERE {PENDING_IN_RANGE} AND o.priority = l.priority
      AND {AVAILABLE_TS} <= statement_timestamp() + make_interval(secs => %(within)s)
      AND {TOPICS}{_filters(skip, held)}
    ORDER BY {AVAILABLE_TS}
    LIMIT 1
) n
"""
    for skip in (False, True)
    for held in (False, True)
}  # (passing over the quarantined ids, over held destinations) -> the statement
NEXT_CLAIMABLE = NEXT_CLAIMABLES[False, False]


def statuses() -> dict[str, str]:
    return {
        "pending": DeliveryStatus.PENDING.value,
        "delivered": DeliveryStatus.DELIVERED.value,
        "dead": DeliveryStatus.DELIVERY_FAILED.value,
    }


def backlog_share(limit: int) -> int:
    """Rows of a claim of ``limit`` kept for the backlog while on-time work would fill it: a
    tenth, at least one (none in a batch of one, which takes the on-time message)."""
    return max(1, int(limit * BACKLOG_SHARE)) if limit > 1 else 0


def claim_args(
    claimer: Claimer,
    limit: int,
    max_bytes: int | None = None,
    since_us: int | None = None,
    window: float = ON_TIME_WINDOW,
    skip: Sequence[uuid.UUID] = (),
    held_back: Sequence[str] = (),
    rotate: int = 0,
) -> dict[str, Any]:
    """The parameters of :data:`CLAIM` (see :func:`claim_batch`) but its range of ids
    (:func:`pending_ids`)."""
    share = backlog_share(limit)
    return {
        "skip": list(skip),
        "held": list(held_back),
        "rotate": rotate,
        **statuses(),
        "relay": claimer.relay_id,
        "visibility": claimer.visibility_timeout,
        "max_attempts": claimer.max_attempts,
        "topics": list(claimer.topics) if claimer.topics else None,
        "limit": limit,
        "max_bytes": max_bytes,
        "since": since_us,
        "window": window,
        "share": share,
        "on_time": limit - share,
    }


def pending_ids(cursor: Any) -> dict[str, uuid.UUID] | None:
    """The range of the pending messages' ids (the ``low`` and ``high`` of :func:`in_range`),
    widened to whole days (:func:`.partitions.whole_days`); None if no message is pending. A
    message that becomes pending outside it afterwards (a fire's, announced by its NOTIFY)
    is claimed by the next claim."""
    cursor.execute(PENDING_IDS)
    low, high = cursor.fetchone()
    if low is None:
        return None
    low, high = whole_days(low, high)
    return {"low": low, "high": high}


def claim_batch(
    cursor: Any,
    claimer: Claimer,
    limit: int,
    max_bytes: int | None = None,
    *,
    since_us: int | None = None,
    window: float = ON_TIME_WINDOW,
    skip: Sequence[uuid.UUID] = (),
    held_back: Sequence[str] = (),
    rotate: int = 0,
) -> Claimed:
    """Claim up to ``limit`` messages holding at most ``max_bytes`` of payload (JSON text;
    always at least one message, whatever its size; None: no cap), passing over ``skip`` and
    the messages of ``held_back`` (``"<host id> <topic>"``).

    Claim order: higher priority first; within a priority, the messages that became
    claimable after ``window`` seconds before ``since_us`` (the ``at_us`` of this relay's
    previous claim that found rows; None: before now), oldest first, then the older ones
    (the backlog), which fill the batch and get at least ``backlog_share(limit)`` of it while
    they last (of the byte cap's prefix too), host by host: each host with a backlog gets
    an equal share of the batch, its oldest first, the hosts in a turn moved by ``rotate``.
    Returns the messages in that order, with the claim's time.
    """
    args = claim_args(claimer, limit, max_bytes, since_us, window, skip, held_back, rotate)
    with transaction.atomic(using=cursor.db.alias):
        bound_transaction(cursor, claim_settings())
        ids = pending_ids(cursor)
        if ids is None:
            return claimed([])
        cursor.execute(CLAIMS[bool(skip), bool(held_back)], {**args, **ids})
    return claimed(cursor.fetchall())  # read once committed, as in autocommit


def claim_settings() -> dict[str, str]:
    """The settings of a claim's transaction: no JIT, and a frozen relay holding it ended
    after half a lease (:func:`~django_dsched.runtime.loops.hold_bounds`).

    The claim is planned above PostgreSQL's ``jit_above_cost`` (100,000 by default: about
    100,000 at a batch of 10, 186,000 at 1,000, growing with the days of its range), and
    compiling it costs far more than running it: 1.6 s a claim against 30 ms on a stock
    PostgreSQL 15 (``bench/tenant_lag_bench.py``, bench/NOTES.md). Set for the claim's own
    transaction, never the session: behind a transaction-mode pooler a session setting would
    stay on the backend for its next client."""
    idle = hold_bounds()["idle_in_transaction_session_timeout"]
    return {"jit": "off", "idle_in_transaction_session_timeout": idle}


def claimed(rows: list[tuple[Any, ...]]) -> Claimed:
    """The messages of the rows a claim returned (:data:`CLAIM_RETURNING`), in order."""
    rows = sorted(rows, key=lambda row: row[7])
    live: list[Message] = []
    dead: list[Message] = []
    why: dict[uuid.UUID, str] = {}
    for row in rows:
        (
            id_,
            topic,
            event_type,
            body,
            attempts,
            priority,
            status,
            _,
            size,
            _,
            host,
            error,
            _,
        ) = row
        if body is None:  # dead-lettered at claim: its event is gone
            payload: dict[str, Any] | None = {}
            text = None
        elif isinstance(body, str | bytes):  # Django's psycopg setup leaves jsonb undecoded
            payload, text = None, body if isinstance(body, str) else body.decode()
        else:
            payload, text = body, None
        message = Message(
            id_,
            topic,
            event_type,
            payload,
            attempts,
            priority,
            size or 0,
            text=text,
            host_id=host,
        )
        if status == DeliveryStatus.PENDING:
            live.append(message)
        else:
            dead.append(message)
            why[id_] = error
    waited = max((row[12] or 0.0 for row in rows), default=0.0)
    return Claimed(live, dead, rows[0][9] if rows else None, why, waited)


def claim(
    cursor: Any, claimer: Claimer, limit: int, max_bytes: int | None = None
) -> tuple[list[Message], list[Message]]:
    """:func:`claim_batch` as the first claim of a process (on time: claimable within the
    last ``ON_TIME_WINDOW``); return (to deliver, dead-lettered at claim)."""
    claimed = claim_batch(cursor, claimer, limit, max_bytes)
    return claimed.live, claimed.dead


def seconds_until_claimable(
    cursor: Any,
    topics: Sequence[str] | None = None,
    *,
    within: float = 86_400.0,
    skip: Sequence[uuid.UUID] = (),
    held_back: Sequence[str] = (),
) -> float | None:
    """Seconds until the next pending message may be claimable (≤ 0: now); None if none
    becomes claimable in the next ``within`` seconds. ``skip``: ids passed over;
    ``held_back``: destinations passed over (``"<host id> <topic>"``)."""
    ids = pending_ids(cursor)  # read now: what a claim's range missed is in this one
    if ids is None:
        return None
    cursor.execute(
        NEXT_CLAIMABLES[bool(skip), bool(held_back)],
        {
            **ids,
            "pending": DeliveryStatus.PENDING.value,
            "topics": topics or None,
            "within": within,
            "skip": list(skip),
            "held": list(held_back),
        },
    )
    (delay,) = cursor.fetchone()
    return None if delay is None else float(delay)
