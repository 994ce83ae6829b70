"""The days of ``event_store_t`` and ``outbox_message_t``: made ahead, held, dropped.

Both tables are ``PARTITION BY RANGE (id)``. Day *D*'s partitions (``event_store_t_20261127``,
``outbox_message_t_20261127``) hold the ids from the uuid whose top 48 bits are *D*'s first
millisecond (UTC) up to the next day's; each table's ``…_default`` partition holds every id
outside the days that exist (a fire for a day not made, a row written by hand with a random
id). So a fire never fails for a missing partition.

* :func:`make_ahead` makes today's and the next :data:`DAYS_AHEAD` days' partitions (the leader
  every retention interval, ``migrate``, ``purge_history``). A day is made as a table of its
  own and attached (``ATTACH PARTITION`` takes only a ``SHARE UPDATE EXCLUSIVE`` lock on the
  parent, which fires and relays do not wait on); rows the default partition already holds
  for that day are moved into it in the same transaction.
* :func:`drop_expired` moves the history's horizon to the retention's cutoff
  (:mod:`.horizon`), then drops a day's two partitions once the whole day is older than the
  cutoff and nothing in it is still needed: no message ``PENDING`` or ``DELIVERY_FAILED``
  (such a day is *held* until they settle: delivered, retried and delivered, or discarded), no
  message delivered within the retention (a late fire's: a fire's message is in its slot's
  day, and is pending until it is delivered).
  Detaching takes an ``ACCESS EXCLUSIVE`` lock on the parents; it waits at most
  :data:`LOCK_TIMEOUT_MS`, then gives up until the next pass, so fires and claims are never
  held up longer than that (plus the detach itself, milliseconds). The detached tables are
  dropped in a transaction of their own, whose commit (removing the files) holds no lock
  anyone else waits on.

The default partition's expired rows go row by row, as before
(:mod:`django_dsched.outbox.retention`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import date, timedelta

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_dsched.conf import app_settings
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import bound_transaction, first_line, hold_bounds
from django_dsched.runtime.refusals import refusal, refused

logger = get_logger(__name__)

EVENTS = "event_store_t"
OUTBOX = "outbox_message_t"
# Dropped or made together, outbox first (a message reads its event).
TABLES = (OUTBOX, EVENTS)

# Days made ahead of today (UTC, database clock): a week without a leader still fires into
# day partitions.
DAYS_AHEAD = 7
# Longest wait for a lock when a day is made or dropped; then the pass gives up and the next
# tries again. Fires and relays queue behind a waiting DROP, so this bounds their stall.
LOCK_TIMEOUT_MS = 200

# A transaction-level advisory lock taken by whoever makes or drops a day (the leader's
# thread, purge_history, migrate), so two of them never race on one day's tables.
ADVISORY_LOCK = 0x6473636868697374  # "dschhist"

_EPOCH = date(1970, 1, 1)


def bound(day: date) -> uuid.UUID:
    """The first id of ``day``: its first millisecond (UTC) in the top 48 bits, zeros after."""
    return uuid.UUID(int=((day - _EPOCH).days * 86_400_000) << 80)


# The ids of one UTC day span this much (milliseconds in the top 48 bits).
_DAY_SPAN = 86_400_000 << 80
_LAST_ID = (1 << 128) - 1


def whole_days(low: uuid.UUID, high: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    """The ids from the first of ``low``'s day to the last of ``high``'s.

    A statement names this range instead of ``low`` to ``high`` so that PostgreSQL plans
    only those days' partitions (day partitions; partitions of other spans are planned if
    they overlap), and does not read the range as selective within a day partition: it
    covers all that the day's statistics saw. A range within a day, read against statistics
    taken before its newest rows, looks like a row or two: a claim named the pending
    messages' range so during a burst, and each of its probes walked every pending message
    of the day by id (up to 1.3 s a claim of 1,000 in a burst of 300,000 fired and
    delivered at once, until autovacuum analyzed the day). What it cannot help: a day not
    analyzed yet, and the default partition, whose statistics span many days.
    """
    first = low.int - low.int % _DAY_SPAN
    last = high.int - high.int % _DAY_SPAN + _DAY_SPAN - 1
    return uuid.UUID(int=first), uuid.UUID(int=min(last, _LAST_ID))


def day_of(id_: uuid.UUID) -> date:
    """The UTC day whose partition holds ``id_`` (the time in its top 48 bits)."""
    return _EPOCH + timedelta(milliseconds=id_.int >> 80)


def partition(table: str, day: date) -> str:
    return f"{table}_{day:%Y%m%d}"


def default_partition(table: str) -> str:
    return f"{table}_default"


# The exactly-once rule on tables partitioned by id. A unique constraint on the parent must
# include the partition key (the id), so (aggregate_id, scheduled_ts) cannot be one. Instead:
# the CHECK dsched_event_slot_in_id holds an event's id to carry its slot's millisecond in its
# top 48 bits (as the event-id rule makes them), so every event for a slot is routed to the
# same partition (the slot's day, or the default one); and each partition has its own
# UNIQUE (aggregate_id, scheduled_ts) index, dsched_event_one_per_slot_<day>, which refuses a
# second event for the slot there, whoever writes it and with whatever id. It holds only the
# rows with a slot (fires): a change's event (NULL slot) could never conflict, and leaving it
# out spares every create, pause or edit one index insert.
def slot_in_id_check() -> str:
    # Whole milliseconds without floating point (extract returns a double before PostgreSQL
    # 14, which could round a slot to the millisecond before): whole seconds, then the
    # milliseconds within the second.
    millis = (
        "(extract(epoch FROM date_trunc('second', scheduled_ts))::bigint * 1000"
        " + mod(floor(date_part('milliseconds', scheduled_ts))::bigint, 1000))"
    )
    return (
        f"ALTER TABLE {EVENTS} ADD CONSTRAINT dsched_event_slot_in_id CHECK (scheduled_ts IS NULL"
        f" OR substring(uuid_send(id) FROM 1 FOR 6)"
        f" = substring(int8send({millis} & {(1 << 48) - 1}) FROM 3 FOR 6))"
    )


def one_per_slot_index(name: str, suffix: str | None) -> str:
    """The exactly-once index of the event partition ``name``, named for its day (or
    ``default``); unnamed (PostgreSQL names it) when ``suffix`` is None."""
    named = "" if suffix is None else f" dsched_event_one_per_slot_{suffix}"
    return (
        f"CREATE UNIQUE INDEX{named} ON {name} (aggregate_id, scheduled_ts)"
        " WHERE scheduled_ts IS NOT NULL"
    )


def default_partitions_sql() -> str:
    made = [f"CREATE TABLE {default_partition(t)} PARTITION OF {t} DEFAULT;" for t in TABLES]
    made.append(one_per_slot_index(default_partition(EVENTS), "default") + ";")
    return "\n".join(made)


@dataclass(frozen=True, slots=True)
class Made:
    """What :func:`make_ahead` did."""

    made: tuple[date, ...] = ()
    # Rows moved from the default partitions into the days made (fires for a day not made
    # yet, e.g. after a week without a leader).
    moved: int = 0
    # Days left for the next pass: a lock not had within LOCK_TIMEOUT_MS.
    skipped: tuple[date, ...] = ()
    # Days left for the next pass because the database refused to move a row of theirs out
    # of the default partition (an operator's trigger or CHECK), each with its error.
    refused: tuple[tuple[date, str], ...] = ()
    # Event partitions given the exactly-once index they lacked (made by hand or by another
    # tool), those left for the next pass (a lock), and those it could not be made on (two
    # events of one slot in it, say: logged as an error).
    indexed: tuple[str, ...] = ()
    index_skipped: tuple[str, ...] = ()
    index_failed: tuple[str, ...] = ()


def _connection(using: str | None) -> BaseDatabaseWrapper:
    return connections[using or app_settings.DATABASE]


# A partition's bounds as pg_get_expr shows them.
_BOUNDS = re.compile(r"FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)")


def _day_of_bounds(bounds: str | None) -> date | None:
    """The UTC day a partition holds, from its bounds (``pg_get_expr``); None if it does not
    hold exactly one day (the default partition, a week, …)."""
    match = _BOUNDS.search(bounds or "")
    if match:
        low, high = (uuid.UUID(text).int for text in match.groups())
        if low % _DAY_SPAN == 0 and high - low == _DAY_SPAN:
            return day_of(uuid.UUID(int=low))
    return None


def day_partitions(table: str, using: str | None = None) -> dict[date, str]:
    """The partitions of ``table`` that hold exactly one UTC day, by day: found by their
    bounds, whatever their names (pg_partman's, say, or one made by hand)."""
    with _connection(using).cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [table],
        )
        rows = cursor.fetchall()
    found = {}
    for name, bounds in rows:
        day = _day_of_bounds(bounds)
        if day is not None:
            found[day] = name
    return found


def days(using: str | None = None) -> list[date]:
    """The days that have an event partition, oldest first."""
    return sorted(day_partitions(EVENTS, using))


def _today(cursor: CursorWrapper) -> date:
    cursor.execute("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")
    (today,) = cursor.fetchone()
    assert isinstance(today, date)
    return today


def _lock_timeout(cursor: CursorWrapper) -> None:
    """Bound this transaction's lock waits, and take the days' advisory lock (within it)."""
    bound_transaction(cursor, {**hold_bounds(), "lock_timeout": f"{LOCK_TIMEOUT_MS}ms"})
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK])


def _lock_not_available(exc: OperationalError) -> bool:
    return getattr(getattr(exc, "__cause__", None), "sqlstate", None) == "55P03"


def make_day(day: date, using: str | None = None) -> int:
    """Make ``day``'s partitions (each table's that is missing), moving into them what the
    default partitions hold for that day; returns the rows moved. Raises ``OperationalError``
    when a lock is not had within :data:`LOCK_TIMEOUT_MS`."""
    connection = _connection(using)
    low, high = str(bound(day)), str(bound(day + timedelta(days=1)))
    moved = 0
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        _lock_timeout(cursor)
        for table in TABLES:
            if day in day_partitions(table, using):
                continue
            name, default = partition(table, day), default_partition(table)
            # Nothing enters the default partition while its rows of the day move (ATTACH
            # takes this lock anyway, to check the default holds none of the day).
            cursor.execute(f"LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE")
            cursor.execute(
                f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
                " INCLUDING STORAGE INCLUDING COMPRESSION)"
            )
            cursor.execute(
                f"WITH gone AS (DELETE FROM {default} WHERE id >= %s AND id < %s RETURNING *)"
                f" INSERT INTO {name} SELECT * FROM gone",
                [low, high],
            )
            moved += cursor.rowcount
            if table == EVENTS:
                cursor.execute(one_per_slot_index(name, f"{day:%Y%m%d}"))
            # The parent's indexes are made on the new table as it is attached.
            cursor.execute(
                f"ALTER TABLE {table} ATTACH PARTITION {name}"
                f" FOR VALUES FROM ('{low}') TO ('{high}')"
            )
    if moved:
        logger.info(
            "history: moved %d row(s) of %s from the default partitions into the day's own",
            moved,
            day.isoformat(),
        )
    return moved


def make_ahead(*, ahead: int = DAYS_AHEAD, using: str | None = None) -> Made:
    """Make the partitions of today (UTC, database clock) and the next ``ahead`` days that
    do not exist. A day whose lock is not had in time is left for the next call."""
    connection = _connection(using)
    with connection.cursor() as cursor:
        today = _today(cursor)
    have = set(days(using))
    made, skipped, moved = [], [], 0
    refused_days: list[tuple[date, str]] = []
    for n in range(ahead + 1):
        day = today + timedelta(days=n)
        if day in have:
            continue
        try:
            moved += make_day(day, using)
        except OperationalError as exc:
            if not _lock_not_available(exc):
                raise
            logger.warning("history: could not make %s's partitions yet (a lock)", day)
            skipped.append(day)
        except DatabaseError as exc:
            if not refused(exc):
                raise
            # A row of the day the database refuses to move out of the default partition
            # (an operator's trigger or CHECK): that day waits, the others are made.
            logger.warning(
                "history: could not make %s's partitions: the database refused to move a row "
                "of that day from the default partition (%s); the next pass tries again",
                day,
                refusal(exc),
            )
            refused_days.append((day, refusal(exc)))
        else:
            made.append(day)
    indexed, index_skipped, index_failed = ensure_one_per_slot(using)
    return Made(
        tuple(made),
        moved,
        tuple(skipped),
        tuple(refused_days),
        indexed,
        index_skipped,
        index_failed,
    )


# The partitions of event_store_t (its tables: a partition partitioned in turn is not
# looked into) that have no valid UNIQUE index whose key is exactly the columns
# aggregate_id and scheduled_ts (in either order; INCLUDE columns aside), over every row or
# over the rows with a slot: the exactly-once index. Each with its bounds, and whether it is
# the default partition.
WITHOUT_ONE_PER_SLOT = """
SELECT c.oid::regclass::text, pg_get_expr(c.relpartbound, c.oid), c.oid = p.partdefid
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_partitioned_table p ON p.partrelid = i.inhparent
WHERE i.inhparent = to_regclass(%s) AND c.relkind = 'r'
  AND NOT EXISTS (
      SELECT FROM pg_index x
      WHERE x.indrelid = c.oid AND x.indisunique AND x.indisvalid
        AND x.indexprs IS NULL AND x.indnkeyatts = 2
        AND (x.indpred IS NULL
             OR pg_get_expr(x.indpred, x.indrelid) = '(scheduled_ts IS NOT NULL)')
        AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum IN (x.indkey[0], x.indkey[1]))
            = ARRAY['aggregate_id', 'scheduled_ts'])
ORDER BY 1
"""


@dataclass(frozen=True, slots=True)
class Unguarded:
    """A partition of ``event_store_t`` without the exactly-once index: the database does
    not refuse a second event for a (schedule, slot) of its rows."""

    name: str  # as SQL names it (quoted, and with its schema when not on the search path)
    # The index's name suffix: the day it holds (YYYYMMDD) or "default"; None for a
    # partition that holds another range (made by hand), which is left to its maker.
    suffix: str | None

    def create_sql(self) -> str:
        """The statement that makes its index."""
        return one_per_slot_index(self.name, self.suffix)


def _unguarded(cursor: CursorWrapper) -> list[Unguarded]:
    cursor.execute(WITHOUT_ONE_PER_SLOT, [EVENTS])
    found = []
    for name, bounds, is_default in cursor.fetchall():
        day = _day_of_bounds(bounds)
        suffix = "default" if is_default else None if day is None else f"{day:%Y%m%d}"
        found.append(Unguarded(name, suffix))
    return found


def without_one_per_slot(using: str | None = None) -> list[Unguarded]:
    """The partitions of ``event_store_t`` that lack the exactly-once index (system check
    dsched.W040)."""
    with _connection(using).cursor() as cursor:
        return _unguarded(cursor)


def ensure_one_per_slot(
    using: str | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Make the exactly-once index of every event day partition and of the default one that
    lacks it (a partition made by hand, or by pg_partman before its template table had the
    index), each in a transaction of its own under the days' advisory lock and lock timeout.
    Returns the partitions indexed, those whose lock was not had in time (next pass), and
    those the index could not be made on (two events of one slot in it, say), each logged
    as an error."""
    connection = _connection(using)
    indexed, skipped, failed = [], [], []
    for part in without_one_per_slot(using):
        if part.suffix is None:
            continue  # not a day: the system check names it, its maker mends it
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                _lock_timeout(cursor)
                if part not in _unguarded(cursor):  # mended meanwhile
                    continue
                # A SHARE lock on the partition while the index is built: writes into that
                # day wait (for a day made ahead, an empty table: milliseconds).
                cursor.execute(part.create_sql())
        except OperationalError as exc:
            if not _lock_not_available(exc):
                raise
            logger.warning("history: could not index %s yet (a lock); next pass", part.name)
            skipped.append(part.name)
        except DatabaseError as exc:
            logger.error(
                "history: the partition %s has no unique (aggregate_id, scheduled_ts) index "
                "and it could not be made (%s): the database does not refuse a second event "
                "for a slot in it. Remove what the index refuses and run purge_history.",
                part.name,
                first_line(exc),
            )
            failed.append(part.name)
        else:
            logger.warning(
                "history: the partition %s had no unique (aggregate_id, scheduled_ts) index "
                "(made by hand or by another tool?): made it",
                part.name,
            )
            indexed.append(part.name)
    return tuple(indexed), tuple(skipped), tuple(failed)


# Why a day past the retention is still kept: each part is read through a partial index
# (pending: the relay's ready index; dead: the dead letters' index) or the end of an index
# (the latest delivery), so asking costs a few pages however big the day.
