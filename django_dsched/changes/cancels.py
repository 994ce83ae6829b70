"""Cancelling schedules: one schedule, a queryset, or many ids (for bulk calls).

A cancel is one statement (:func:`_cancel`): it locks the rows (waiting for a fire in
flight, then deciding on each row as that fire left it), cancels those that may be cancelled
and writes their audit events (:mod:`.audit`) with the new ``aggregate_version``, so it
costs one round trip and no transaction of its own, and several are all or nothing.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, NamedTuple

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet

from django_dsched.changes import audit
from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.enums import LIVE, ScheduleState
from django_dsched.history import event_ids
from django_dsched.models import Event, Schedule
from django_dsched.runtime import binding


def cancel(schedules: QuerySet[Schedule], *, actor: Any = None) -> ChangeCount:
    """End schedules for good: a cancelled schedule never fires again and cannot resume.

    One statement (:func:`_cancel`, ``schedules`` as its subquery): it locks the rows
    ``schedules`` selects (waiting for a fire in flight, then deciding on the row as that
    fire left it), cancels those that may be cancelled and writes their audit events, so a
    cancel costs one round trip and no transaction of its own, and several are all or
    nothing."""
    connection = connections[app_settings.DATABASE]
    try:
        query, query_params = (
            schedules.using(connection.alias)
            .order_by()
            .values_list("pk")
            .query.get_compiler(using=connection.alias)
            .as_sql()
        )
    except EmptyResultSet:  # a lookup that can match nothing (a key no column can hold)
        return ChangeCount(changed=0, skipped=0)
    # The subquery's positional parameters, named for the statement's own.
    names = iter(range(len(query_params)))
    source = _PERCENT.sub(
        lambda match: match[0] if match[0] == "%%" else f"%(q{next(names)})s", query
    )
    params = {f"q{n}": value for n, value in enumerate(query_params)}
    with connection.cursor() as cursor:
        ((found, cancelled),) = _cancel(
            cursor,
            # Each schedule once, however often the queryset gives it (a UNION ALL).
            f"SELECT DISTINCT q.id_ FROM ({source}) AS q(id_) ORDER BY 1",
            params,
            COUNTS_ALL,
            actor=actor,
            host=None,
        )
    return ChangeCount(changed=int(cancelled), skipped=int(found) - int(cancelled))


# A positional placeholder of compiled SQL, or a literal percent sign (``%%``, left as it
# is): read left to right, so ``%%%s`` is a percent sign, then a placeholder.
_PERCENT = re.compile(r"%[%s]")


class Locked(NamedTuple):
    """A schedule as :func:`cancel_ids` locked it, before the cancel."""

    schedule_id: uuid.UUID
    schedule_name: str
    idempotency_key: str | None
    state: str  # its state under the lock: cancelled now if it was live, else unchanged
    host_id: uuid.UUID

    @property
    def cancelled(self) -> bool:
        """Whether the cancel ended it: it was live under the lock."""
        return self.state in LIVE


# What the cancel statement gives back: each locked row (the REST API reports them item by
# item), or only how many rows of the host it locked and how many of those it cancelled
# (the Python API: fetching and converting 10,000 rows cost it ~40 % of its rate).
ROWS_LOCKED = """SELECT old.schedule_id, old.schedule_name, old.idempotency_key, old.state,
               old.host_id
        FROM old"""
COUNTS_LOCKED = """SELECT count(*) FILTER (WHERE old.host_id = %(host)s),
               count(*) FILTER (WHERE old.host_id = %(host)s AND old.state = ANY(%(allowed)s))
        FROM old"""
COUNTS_ALL = """SELECT count(*), count(*) FILTER (WHERE old.state = ANY(%(allowed)s))
        FROM old"""


def cancel_ids_counted(ids: list[Any], *, host: uuid.UUID, actor: Any = None) -> tuple[int, int]:
    """:func:`cancel_ids` giving only (rows of ``host`` locked, of which cancelled)."""
    if not ids:
        return 0, 0
    ((found, cancelled),) = _cancel_ids(ids, COUNTS_LOCKED, actor=actor, host=host)
    return int(found), int(cancelled)


def cancel_ids(ids: list[Any], *, actor: Any = None) -> list[Locked]:
    """:func:`cancel` of the schedules with these ids in one statement (for bulk calls):
    it locks them (waiting for a fire in flight), cancels those that may be cancelled and
    writes their audit events, all in SQL. Gives each schedule found as the statement
    locked it (id, name, key, state before the cancel, host): what it did, row by row (an
    id that names no schedule any more is absent)."""
    if not ids:
        return []
    return [Locked(*row) for row in _cancel_ids(ids, ROWS_LOCKED, actor=actor, host=None)]


def _cancel_ids(
    ids: list[Any], result: str, *, actor: Any, host: uuid.UUID | None
) -> list[tuple[Any, ...]]:
    """:func:`_cancel` of the schedules with these ids (sorted by the caller), sent as one
    binary array bound on the server (binding.py)."""
    connection = connections[app_settings.DATABASE]
    with binding.cursor(connection) as cursor:
        source = "SELECT * FROM unnest(%(ids)b::uuid[]) AS w(id_)"
        return _cancel(cursor, source, {"ids": ids}, result, actor=actor, host=host)


def _cancel(
    cursor: Any,
    source: str,
    source_params: dict[str, Any],
    result: str,
    *,
    actor: Any,
    host: uuid.UUID | None,
) -> list[tuple[Any, ...]]:
    """Run the cancel statement on ``cursor``: the schedules whose ids ``source`` selects
    (a query of one column ``id_``, in the order to lock them; its parameters
    ``source_params``), ending in ``result`` (a SELECT from ``old``); its rows."""
    connection = connections[app_settings.DATABASE]
    quote = connection.ops.quote_name
    table, events = quote(Schedule._meta.db_table), quote(Event._meta.db_table)
    # Every access to the table is an index probe per id, whatever the statistics say (a
    # table filled moments ago, or analysed while the rows were still uncommitted, reads as
    # empty: a join planned on that went quadratic). ``old`` locks each row through a
    # LATERAL subquery with FOR UPDATE (never flattened: a nested loop over the ids, an
    # index probe each, in the callers' sorted order, so concurrent calls lock alike). The
    # UPDATE takes the ids ``old`` found cancellable as one array (probes of the primary
    # key; it reads ``old`` whole first, so every lock is held before any write), and the
    # audit events are built from ``old``: the rows are locked, so the version and state
    # it read are the ones the UPDATE changes. No join between the CTEs at all.
    statement = f"""
        WITH w AS (
            {source}
        ), old AS (
            SELECT l.schedule_id, l.state, l.host_id, l.aggregate_version, l.schedule_name,
                   l.idempotency_key, l.origin
            FROM w CROSS JOIN LATERAL (
                SELECT s.schedule_id, s.state, s.host_id, s.aggregate_version,
                       s.schedule_name, s.idempotency_key, s.origin
                FROM {table} s WHERE s.schedule_id = w.id_
                FOR UPDATE
            ) l
        ), c AS (
            UPDATE {table} s
            SET state = %(target)s, active = false,
                aggregate_version = s.aggregate_version + 1, updated_ts = statement_timestamp()
            WHERE s.schedule_id = ANY(ARRAY(
                SELECT old.schedule_id FROM old WHERE old.state = ANY(%(allowed)s)))
            RETURNING 1
        ), audit AS (
            INSERT INTO {events} (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                event_type, event_ts, payload, metadata)
            SELECT {event_ids.change_sql("statement_timestamp()")}, old.host_id,
                   old.schedule_id, 'Schedule',
                   old.aggregate_version + 1, %(event_type)s, statement_timestamp(),
                   jsonb_build_object('actor', %(actor)s::text, 'at', statement_timestamp(),
                       'changes', jsonb_build_object(
                           'state', jsonb_build_array(old.state, %(target)s::text))),
                   jsonb_build_object('actor', %(actor)s::text,
                       'schedule_name', old.schedule_name, 'origin', old.origin)
            FROM old WHERE old.state = ANY(%(allowed)s)
        )
        {result}
    """
    params: dict[str, Any] = {
        **source_params,
        "target": ScheduleState.CANCELLED.value,
        "allowed": list(LIVE),
        "event_type": audit.PREFIX + "cancelled",
        "actor": audit.actor_name(actor),
        "host": host,
    }
    # Each audit event's id has the statement's time in its top bits (event_ids.change_sql):
    # it is stored in that day's partition.
    cursor.execute(statement, params)
    # ``c`` runs whether or not it is read (a data-modifying WITH always does), on exactly
    # the rows ``old`` locked in a cancellable state.
    return list(cursor.fetchall())
