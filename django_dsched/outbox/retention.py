"""Retention: drop whole days of history, and delete the default partition's expired rows.

``DSCHED_RETENTION_DAYS`` (default 45): a DELIVERED message goes once it was delivered that
long ago; an event goes once it fired that long ago and its outbox message is gone. Each pass
first moves the history's horizon to its cutoff (:mod:`django_dsched.history.horizon`), in
a transaction of its own: no backfill reaches before what a purge may have deleted. A message
reads its payload from its event (stored once, there), so the event stays as long as the
message does, whatever its status (dead letters and their events stay until an operator
handles them).

``event_store_t`` and ``outbox_message_t`` are partitioned by day (:mod:`django_dsched.history`):
a day whose every row is expired goes as a whole (``DROP TABLE`` of its two partitions: no
row is read, next to no WAL), and a day holding a pending message or a dead letter is kept
until they settle (:func:`~django_dsched.history.expiry.drop_expired`). The default
partitions (ids of no day: a fire for a day not made, rows written by hand) are purged row
by row as before: each batch is its own short transaction that deletes at most
``DSCHED_RETENTION_BATCH_SIZE`` rows picked with ``FOR UPDATE SKIP LOCKED``, so it never
waits on, or holds up, a relay or a fire. Used by ``manage.py purge_history`` and by the
leader (:func:`purge_expired`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.db import DatabaseError, connections, transaction

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.history import event_ids, horizon
from django_dsched.history.expiry import Held, cutoff_of, drop_expired
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import bound_transaction
from django_dsched.runtime.narrowing import halves
from django_dsched.runtime.refusals import refused

logger = get_logger(__name__)

# ``%(cutoff)s``: the purge's cutoff, to which the history's horizon was moved first
# (history/horizon.py): nothing at or after it is deleted.
# ``%(skip)s``: rows the database refused to delete earlier in this pass (a trigger an
# operator added): passed over, so one cannot stop the others' deletes.
EXPIRED_OUTBOX = """
    SELECT id FROM outbox_message_t_default
    WHERE status = %(delivered)s AND delivered_ts < %(cutoff)s
      AND id <> ALL(%(skip)s::uuid[])
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED"""
PURGE_OUTBOX = f"DELETE FROM outbox_message_t_default WHERE id IN ({EXPIRED_OUTBOX}\n)"

# A message keeps its event, whatever its status: it reads its payload from it (the same id
# is in the same partition of both tables: an event of the default partition has its message
# in the outbox's default partition, if anywhere). OFFSET 0
# keeps the test a primary-key probe per event: without it the planner may turn NOT EXISTS
# into a hash anti join over the whole outbox (measured: 300,000 events, both tables
# scanned, 222 ms per pass). The probe's cost follows the expired events kept (~2 us each),
# the hash's the whole outbox: it is only slower when nearly every event is expired and kept
# (300,000 of them: 640 ms against 200 ms).
KEEPS_EVENT = """
          SELECT FROM outbox_message_t_default o
          WHERE o.id = e.id{also}
          OFFSET 0"""

# An event's id carries its slot's millisecond (a fire, which never comes before its slot)
# or its change's (an audit event): an event written before the cutoff has an id below the
# cutoff's next millisecond's, so the expired ones are a range of the primary key, not a read
# of the whole default partition (there is no index on event_ts).
EXPIRED_IDS = (
    "e.id < "
    + event_ids.floor_sql("%(cutoff)s::timestamptz + interval '1 millisecond'")
    + "\n      AND e.event_ts < %(cutoff)s"
)

EXPIRED_EVENTS = f"""
    SELECT e.id FROM event_store_t_default e
    WHERE {EXPIRED_IDS}
      AND NOT EXISTS ({KEEPS_EVENT.format(also="")}
      )
      AND e.id <> ALL(%(skip)s::uuid[])
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED"""
PURGE_EVENTS = f"DELETE FROM event_store_t_default WHERE id IN ({EXPIRED_EVENTS}\n)"
# The tables the two purges delete from, and the rows they would take (for narrowing).
PURGES = {
    PURGE_OUTBOX: ("outbox_message_t_default", EXPIRED_OUTBOX),
    PURGE_EVENTS: ("event_store_t_default", EXPIRED_EVENTS),
}

COUNT_OUTBOX = """
SELECT count(*) FROM outbox_message_t_default
WHERE status = %(delivered)s AND delivered_ts < %(cutoff)s
"""

# Counted before anything is deleted: a message the outbox purge deletes first (delivered
# before the cutoff) does not keep its event, as in the real pass.
NOT_PURGED_FIRST = """
            AND (o.status = %(delivered)s AND o.delivered_ts < %(cutoff)s) IS NOT TRUE"""
COUNT_EVENTS = f"""
SELECT count(*) FROM event_store_t_default e
WHERE {EXPIRED_IDS}
  AND NOT EXISTS ({KEEPS_EVENT.format(also=NOT_PURGED_FIRST)}
  )
"""


@dataclass(frozen=True, slots=True)
class Purged:
    # Rows deleted one by one (from the default partitions).
    outbox: int = 0
    events: int = 0
    # True when a limit stopped the purge with expired rows left (call again later).
    more: bool = False
    # Whole days dropped, days past the retention that are kept (and why), and days whose
    # drop did not get its lock in time (the next pass tries again).
    days: tuple[date, ...] = ()
    held: tuple[Held, ...] = ()
    skipped: tuple[date, ...] = ()
    # Counting only: the rows in the days that would be dropped.
    day_outbox: int = 0
    day_events: int = 0


def _params(cutoff: datetime, limit: int = 0) -> dict[str, Any]:
    return {
        "delivered": DeliveryStatus.DELIVERED.value,
        "cutoff": cutoff,
        "limit": limit,
        "skip": [],
    }


def _purge(
    sql: str, params: dict[str, Any], using: str, max_batches: int | None
) -> tuple[int, bool]:
    total, batches = 0, 0
    limit = params["limit"]
    assert isinstance(limit, int)
    skip: list[uuid.UUID] = []
    while max_batches is None or batches < max_batches:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            bound_transaction(cursor)  # a frozen pass holds its row locks half a lease at most
            try:
                with transaction.atomic(using=using):
                    cursor.execute(sql, {**params, "skip": skip})
                    deleted = chosen = cursor.rowcount
            except DatabaseError as exc:
                if not refused(exc):
                    raise
                deleted, refused_ids = _purge_narrowing(sql, {**params, "skip": skip}, using)
                skip += refused_ids
                chosen = deleted + len(refused_ids)
        total += deleted
        batches += 1
        if chosen < limit:
            return total, False
    return total, True


def _purge_narrowing(sql: str, params: dict[str, Any], using: str) -> tuple[int, list[uuid.UUID]]:
    """The batch ``sql`` would delete, after the database refused the delete of one of its
    rows (an operator's trigger): deleted in halves under savepoints, the refused rows left
    in place, logged and returned (the rest of the pass passes over them; the next pass tries
    again)."""
    table, expired = PURGES[sql]
    with connections[using].cursor() as cursor:
        cursor.execute(expired, params)
        ids = [row[0] for row in cursor.fetchall()]

    def delete(part: list[uuid.UUID]) -> list[int]:
        with connections[using].cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE id = ANY(%s::uuid[])", [part])
            return [cursor.rowcount]

    deleted, refused_rows = halves(using, delete, ids)
    for id_, error in refused_rows:
        logger.warning(
            "retention: the database refused to delete %s from %s (%s): left in place, the "
            "others deleted",
            id_,
            table,
            error,
        )
    return sum(deleted), [id_ for id_, _ in refused_rows]


def purge_expired(
    *,
    days: float | None = None,
    batch_size: int | None = None,
    max_batches: int | None = None,
    using: str | None = None,
) -> Purged:
    """Drop the expired days nothing holds, then delete the default partitions' expired rows,
    ``batch_size`` rows per transaction.

    ``days`` defaults to ``DSCHED_RETENTION_DAYS`` (None there: nothing is deleted).
    ``max_batches`` bounds the row-by-row work per table for callers with a time budget, such
    as the leader; ``Purged.more`` then says whether rows were left for the next call.
    """
    days = app_settings.RETENTION_DAYS if days is None else days
    if days is None:
        return Purged()
    using = using or app_settings.DATABASE
    dropped = drop_expired(days_kept=days, using=using)
    # The horizon first (in its own transaction), then nothing older than its cutoff.
    cutoff = horizon.advance(days, using)
    params = _params(cutoff, batch_size or app_settings.RETENTION_BATCH_SIZE)
    outbox, more_outbox = _purge(PURGE_OUTBOX, params, using, max_batches)
    events, more_events = _purge(PURGE_EVENTS, params, using, max_batches)
    purged = Purged(
        outbox,
        events,
        more_outbox or more_events,
        dropped.dropped,
        dropped.held,
        dropped.skipped,
    )
    if outbox or events:
        logger.info(
            "retention: deleted %d delivered outbox message(s) and %d event(s) older than "
            "%g day(s) from the default partitions%s",
            outbox,
            events,
            days,
            "; more left for the next pass" if purged.more else "",
        )
    return purged


def count_expired(*, days: float | None = None, using: str | None = None) -> Purged:
    """What :func:`purge_expired` would do now (for ``purge_history --dry-run``)."""
    days = app_settings.RETENTION_DAYS if days is None else days
    if days is None:
        return Purged()
    using = using or app_settings.DATABASE
    dropped = drop_expired(days_kept=days, using=using, dry_run=True)
    params = _params(cutoff_of(days, using))
    with connections[using].cursor() as cursor:
        cursor.execute(COUNT_OUTBOX, params)
        (outbox,) = cursor.fetchone()
        cursor.execute(COUNT_EVENTS, params)
        (events,) = cursor.fetchone()
    return Purged(
        outbox,
        events,
        days=dropped.dropped,
        held=dropped.held,
        day_outbox=dropped.outbox,
        day_events=dropped.events,
    )
