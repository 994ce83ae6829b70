"""Which days of history have expired, which are held and why, and dropping the others.

:func:`drop_expired` moves the history's horizon to the retention's cutoff
(:mod:`.horizon`), then drops a day's two partitions once the whole day is older than the
cutoff and nothing in it is still needed: no message ``PENDING`` or ``DELIVERY_FAILED`` (such
a day is *held* until they settle: delivered, retried and delivered, or discarded), no
message delivered within the retention (a late fire's: a fire's message is in its slot's day,
and is pending until it is delivered). Detaching takes an ``ACCESS EXCLUSIVE`` lock on the
parents; it waits at most :data:`~.partitions.LOCK_TIMEOUT_MS`, then gives up until the next
pass, so fires and claims are never held up longer than that (plus the detach itself,
milliseconds). The detached tables are dropped in a transaction of their own, whose commit
(removing the files) holds no lock anyone else waits on. :func:`held_days` is the days at a
glance for the cluster page and ``dsched cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import OperationalError, transaction
from django.db.backends.utils import CursorWrapper

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.history import horizon
from django_dsched.history.partitions import (
    EVENTS,
    OUTBOX,
    _connection,
    _lock_not_available,
    _lock_timeout,
    day_partitions,
    days,
)
from django_dsched.models.times import storable
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)


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
