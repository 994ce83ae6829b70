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
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.history import horizon
from django_dsched.models.times import storable
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import bound_transaction, first_line, hold_bounds

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
    # Event partitions given the exactly-once index they lacked (made by hand or by another
    # tool), those left for the next pass (a lock), and those it could not be made on (two
    # events of one slot in it, say: logged as an error).
    indexed: tuple[str, ...] = ()
    index_skipped: tuple[str, ...] = ()
    index_failed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Held:
    """A day older than the retention that is kept, and why."""

    day: date
    pending: int  # messages PENDING (waiting, retrying, or being delivered)
    dead: int  # dead letters (DELIVERY_FAILED): retry or discard them to release the day
    # The latest delivery in the day when it is within the retention (a late fire's: its
    # delivery): the day goes once that too is older.
    latest: datetime | None = None

    def describe(self) -> str:
        reasons = []
        if self.pending:
            reasons.append(f"{self.pending} pending message(s)")
        if self.dead:
            reasons.append(f"{self.dead} dead letter(s)")
        if self.latest is not None:
            reasons.append(f"delivered at {self.latest:%Y-%m-%d %H:%M:%S} UTC")
        return f"{self.day:%Y-%m-%d} held by {', '.join(reasons)}"


@dataclass(frozen=True, slots=True)
class Dropped:
    """What :func:`drop_expired` did (or, counting, would do)."""

    dropped: tuple[date, ...] = ()
    held: tuple[Held, ...] = ()
    # Days past the retention whose drop could not get its lock in time (next pass).
    skipped: tuple[date, ...] = ()
    # Counting only (purge_history --dry-run): rows in the days that would go.
    events: int = 0
    outbox: int = 0


@dataclass(frozen=True, slots=True)
class HistoryDays:
    """The day partitions at a glance (the cluster page, ``dsched cluster``)."""

    first: date | None
    last: date | None
    count: int
    held: tuple[Held, ...] = field(default=())


def _connection(using: str | None) -> BaseDatabaseWrapper:
    return connections[using or app_settings.DATABASE]


# A partition's bounds as pg_get_expr shows them.
_BOUNDS = re.compile(r"FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)")
_DAY_SPAN = 86_400_000 << 80


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
        else:
            made.append(day)
    indexed, index_skipped, index_failed = ensure_one_per_slot(using)
    return Made(tuple(made), moved, tuple(skipped), indexed, index_skipped, index_failed)


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
HOLDS = f"""
SELECT (SELECT count(*) FROM {{outbox}} WHERE status = %(pending)s),
       (SELECT count(*) FROM {{outbox}} WHERE status = %(dead)s),
       -- (A time Python reads whatever the row holds: models/times.py.)
       (SELECT {storable("latest", nullable=False)}
        FROM (SELECT max(delivered_ts) AS latest FROM {{outbox}}
              WHERE status = %(delivered)s) d)
"""


def _holds(cursor: CursorWrapper, day: date, outbox: str, cutoff: datetime) -> Held | None:
    cursor.execute(
        HOLDS.format(outbox=outbox),
        {
            "pending": DeliveryStatus.PENDING.value,
            "dead": DeliveryStatus.DELIVERY_FAILED.value,
            "delivered": DeliveryStatus.DELIVERED.value,
        },
    )
    pending, dead, latest = cursor.fetchone()
    recent = latest if latest is not None and latest >= cutoff else None
    if pending or dead or recent is not None:
        return Held(day, pending, dead, recent)
    return None


def cutoff_of(days_kept: float, using: str | None = None) -> datetime:
    """The cutoff of a retention keeping ``days_kept`` days, now (database clock)."""
    with _connection(using).cursor() as cursor:
        cursor.execute(
            "SELECT statement_timestamp() - make_interval(secs => %s)", [float(days_kept) * 86400]
        )
        (cutoff,) = cursor.fetchone()
    assert isinstance(cutoff, datetime)
    return cutoff


def _expired_days(cutoff: datetime, using: str | None) -> list[tuple[date, str, str]]:
    """The days wholly before ``cutoff`` that have both partitions (day, outbox partition,
    event partition)."""
    last = cutoff.astimezone(UTC).date()
    outbox, events = day_partitions(OUTBOX, using), day_partitions(EVENTS, using)
    return [
        (day, outbox[day], events[day])
        for day in sorted(set(outbox) & set(events))
        if day + timedelta(days=1) <= last
    ]


def drop_expired(*, days_kept: float, using: str | None = None, dry_run: bool = False) -> Dropped:
    """Drop the days older than ``days_kept`` that nothing holds (oldest first), each in its
    own short transaction; with ``dry_run`` count what would go instead.

    The history's horizon is moved to the cutoff first, in a transaction of its own
    (:func:`.horizon.advance`): no backfill reaches before it once a day before it may be
    gone."""
    connection = _connection(using)
    dropped, held, skipped = [], [], []
    events = outbox = 0
    cutoff = cutoff_of(days_kept, using) if dry_run else horizon.advance(days_kept, using)
    candidates = _expired_days(cutoff, using)
    if not dry_run:
        drop_detached(using)  # what a pass that died half way left
    for day, outbox_name, events_name in candidates:
        with connection.cursor() as cursor:
            hold = _holds(cursor, day, outbox_name, cutoff)
            if hold is not None:
                held.append(hold)
                continue
            if dry_run:
                cursor.execute(
                    f"SELECT (SELECT count(*) FROM {outbox_name}),"
                    f" (SELECT count(*) FROM {events_name})"
                )
                in_outbox, in_events = cursor.fetchone()
                outbox, events = outbox + in_outbox, events + in_events
                dropped.append(day)
                continue
        try:
            hold = _drop(day, outbox_name, events_name, cutoff, using)
        except OperationalError as exc:
            if not _lock_not_available(exc):
                raise
            logger.warning("history: could not drop %s yet (a lock); next pass", day)
            skipped.append(day)
            continue
        if hold is None:
            dropped.append(day)
        else:
            held.append(hold)
    if dropped and not dry_run:
        logger.info(
            "retention: dropped the history of %s (events and messages)",
            ", ".join(d.isoformat() for d in dropped),
        )
    return Dropped(tuple(dropped), tuple(held), tuple(skipped), events, outbox)


# A detached day's tables are renamed so, and dropped in a transaction of their own.
EXPIRED_SUFFIX = "_expired"


def _drop(day: date, outbox: str, events: str, cutoff: datetime, using: str | None) -> Held | None:
    """Drop one day's partitions unless, asked again under their locks, something holds it.

    Two transactions: the first detaches the partitions (and renames them ``…_expired``)
    under the parents' ``ACCESS EXCLUSIVE`` lock, a catalog change of a few milliseconds; the
    second drops the detached tables, whose commit removes the files (0.2 s per 200,000 rows
    measured) while holding locks on those tables only, which nothing else uses. A drop in the
    first transaction would hold the parents' lock, and so every fire and claim, through that
    removal."""
    connection = _connection(using)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        _lock_timeout(cursor)
        cursor.execute(
            "SELECT to_regclass(%s) IS NULL OR to_regclass(%s) IS NULL", [outbox, events]
        )
        if cursor.fetchone()[0]:  # dropped by another meanwhile
            return None
        # Nothing is written to the day while it is asked and detached. The parents first,
        # as every query locks them (parent, then partitions): locking a day's partitions
        # first would deadlock with a claim started in between, and this pass, whose lock
        # timeout is shorter than deadlock_timeout, would lose every time.
        cursor.execute(
            f"LOCK TABLE ONLY {OUTBOX}, ONLY {EVENTS}, {outbox}, {events} IN ACCESS EXCLUSIVE MODE"
        )
        hold = _holds(cursor, day, outbox, cutoff)
        if hold is not None:
            return hold
        for table, name in ((OUTBOX, outbox), (EVENTS, events)):
            cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
            cursor.execute(f"ALTER TABLE {name} RENAME TO {name[:40]}{EXPIRED_SUFFIX}")
    drop_detached(using)
    return None


def drop_detached(using: str | None = None) -> list[str]:
    """Drop the tables of days detached by retention (``…_expired``; also those a pass left
    behind when its process died between the two transactions)."""
    connection = _connection(using)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.oid::regclass::text FROM pg_class c"
            " WHERE c.relkind = 'r' AND NOT c.relispartition"
            " AND c.relnamespace IN (SELECT oid FROM pg_namespace"
            " WHERE nspname = ANY(current_schemas(false)))"
            " AND c.relname ~ %s",
            [f"^({OUTBOX}|{EVENTS})_.*{EXPIRED_SUFFIX}$"],
        )
        names = [name for (name,) in cursor.fetchall()]
    if names:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            _lock_timeout(cursor)
            cursor.execute(f"DROP TABLE IF EXISTS {', '.join(names)}")
    return names


def held_days(*, days_kept: float | None = None, using: str | None = None) -> HistoryDays:
    """The day partitions, and those past the retention that are held (and why)."""
    kept = app_settings.RETENTION_DAYS if days_kept is None else days_kept
    found = days(using)
    held: list[Held] = []
    if kept is not None and found:
        cutoff = cutoff_of(kept, using)
        with _connection(using).cursor() as cursor:
            for day, outbox, _events in _expired_days(cutoff, using):
                hold = _holds(cursor, day, outbox, cutoff)
                if hold is not None:
                    held.append(hold)
    return HistoryDays(
        first=found[0] if found else None,
        last=found[-1] if found else None,
        count=len(found),
        held=tuple(held),
    )
