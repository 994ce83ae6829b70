"""State changes of schedules: the one code path for the admin, the API and commands.

Each function runs inside the caller's transaction when there is one (else its own),
locks the rows it changes (waiting for a fire in flight to commit), bumps
``aggregate_version`` and writes an audit event with that version (:mod:`.audit`), so a
rolled-back caller leaves nothing behind and every change is in the schedule's history.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.exceptions import EmptyResultSet
from django.db import connections, transaction
from django.db.models import DateTimeField, Field, Func, QuerySet
from django.utils.translation import gettext as _

from django_dsched.changes import audit, creates, permissions
from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import ConflictError, EditNotPermitted, ValidationError
from django_dsched.firing.batch import fire_slots, reason
from django_dsched.history import event_ids
from django_dsched.models import Event, Schedule
from django_dsched.models.schedule import BOUND_FIELDS, GRID_FIELDS
from django_dsched.models.validators import validate_plain_text
from django_dsched.runtime import binding
from django_dsched.runtime.clock import database_now

# Most slots one backfill may fire.
MAX_BACKFILL = 10_000


def _atomic() -> transaction.Atomic:
    return transaction.atomic(using=app_settings.DATABASE)


# Times a change is tried again when a schedule changed between the read and the write.
MAX_ATTEMPTS = 20


def _transition(
    schedules: QuerySet[Schedule],
    *,
    allowed: set[str],
    target: str,
    verb: str,
    actor: Any,
    change: Any = None,
    accept: Callable[[Schedule, datetime], bool] | None = None,
    **details: Any,
) -> ChangeCount:
    """Move each schedule whose state is ``allowed`` to ``target``, with an audit event.

    ``change(schedule, now)`` may adjust more fields; it returns their names. ``accept``
    may turn more schedules away (they count as skipped).

    Two statements, with no lock held between them: one reads the schedules and the
    database's clock, one writes the changes and their audit events (:func:`_write`), each
    row only if its ``aggregate_version`` is still the one read (compare-and-set). A row a
    fire or another change moved meanwhile is read again and decided again (a fire in
    flight is waited for by the write, as a lock would). So a change of one schedule costs
    two round trips and no transaction of its own; a change of several writes in one
    transaction (or the caller's), so it is all or nothing.
    """
    with ExitStack() as stack:
        return _transition_rounds(
            stack, schedules, allowed, target, verb, actor, change, accept, details
        )


def _transition_rounds(
    stack: ExitStack,
    schedules: QuerySet[Schedule],
    allowed: set[str],
    target: str,
    verb: str,
    actor: Any,
    change: Any,
    accept: Callable[[Schedule, datetime], bool] | None,
    details: dict[str, Any],
) -> ChangeCount:
    changed = skipped = 0
    clock = Func(function="clock_timestamp", output_field=DateTimeField())
    pending = schedules
    atomic = False
    for _attempt in range(MAX_ATTEMPTS):
        rows = list(pending.annotate(dsched_now=clock).order_by("pk"))
        if not rows:
            break
        now: datetime = rows[0].dsched_now
        eligible = [s for s in rows if s.state in allowed and (accept is None or accept(s, now))]
        skipped += len(rows) - len(eligible)
        if not eligible:
            break
        updates: list[tuple[Schedule, tuple[int, str], list[str]]] = []
        events = []
        for schedule in eligible:
            read = (schedule.aggregate_version, str(schedule.state))
            before = schedule.state
            schedule.state = target
            fields = ["state", "active"]
            if change is not None:
                fields += change(schedule, now)
            schedule.active = schedule.state == ScheduleState.ACTIVE
            schedule.aggregate_version += 1
            schedule.updated_ts = now
            updates.append((schedule, read, fields))
            events.append(
                audit.event_for(
                    schedule,
                    verb,
                    actor=actor,
                    at=now,
                    changes={"state": [before, target]},
                    **details,
                )
            )
        if len(updates) > 1 and not atomic:
            # Several rows: all or none, even if a later round gives up (ConflictError).
            # (One row needs no transaction: a round that writes nothing changes nothing.)
            stack.enter_context(_atomic())
            atomic = True
        written = _write(updates, events, now)
        changed += len(written)
        moved = [schedule.pk for schedule, _v, _f in updates if schedule.pk not in written]
        if not moved:
            break
        pending = Schedule.objects.filter(pk__in=moved)
    else:
        raise ConflictError(
            _("These schedules kept changing while they were being changed; try again."),
            code="conflict",
        )
    return ChangeCount(changed=changed, skipped=skipped)


def _write(
    updates: list[tuple[Schedule, tuple[int, str], list[str]]],
    events: list[Event],
    now: datetime,
) -> set[Any]:
    """Write each schedule's ``fields`` (and its version and ``updated_ts``) where its
    version and state are still the ones read, and the audit events of the rows written, in
    one statement. Returns the ids written.

    The state is compared too: the fire path completes a schedule without a new version
    when it ends without firing (a fire limit reached, a missed one-shot, past its end)."""
    connection = connections[app_settings.DATABASE]
    quote = connection.ops.quote_name
    names = list(dict.fromkeys(name for _s, _v, fields in updates for name in fields))
    columns = [
        field for name in names if isinstance(field := Schedule._meta.get_field(name), Field)
    ]
    single = len(updates) == 1
    types = ["uuid", "bigint", "text", "uuid", "jsonb", "jsonb"]
    types += [str(field.db_type(connection)) for field in columns]
    aliases = ["id_", "version_", "state_", "event_id_", "payload_", "metadata_"]
    aliases += [f"f{n}" for n in range(len(columns))]
    if single:  # one row: plain parameters plan faster than arrays
        source = "SELECT " + ", ".join(
            f"%s::{db_type} AS {alias}" for db_type, alias in zip(types, aliases, strict=True)
        )
    else:
        arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
        source = f"SELECT * FROM unnest({arrays}) AS v({', '.join(aliases)})"
    sets = ", ".join(f"{quote(str(field.column))} = v.f{n}" for n, field in enumerate(columns))
    statement = f"""
        WITH v AS ({source}), c AS (
            UPDATE {quote(Schedule._meta.db_table)} s
            SET {sets}, aggregate_version = v.version_ + 1, updated_ts = %s
            FROM v
            WHERE s.schedule_id = v.id_ AND s.aggregate_version = v.version_
              AND s.state = v.state_
            RETURNING s.schedule_id, s.host_id, s.aggregate_version, v.event_id_, v.payload_,
                      v.metadata_
        ), audit AS (
            INSERT INTO {quote(Event._meta.db_table)} (id, host_id, aggregate_id,
                aggregate_type, aggregate_version, event_type, event_ts, payload, metadata)
            SELECT c.event_id_, c.host_id, c.schedule_id, 'Schedule', c.aggregate_version,
                   %s, %s, c.payload_, c.metadata_
            FROM c
        )
        SELECT schedule_id FROM c
    """
    params: list[Any] = [
        [schedule.pk for schedule, _v, _f in updates],
        [version for _s, (version, _state), _f in updates],
        [state for _s, (_version, state), _f in updates],
        [event.id for event in events],
        [json.dumps(event.payload) for event in events],
        [json.dumps(event.metadata) for event in events],
    ]
    params += [
        [getattr(schedule, field.attname) for schedule, _v, _f in updates] for field in columns
    ]
    if single:
        params = [values[0] for values in params]
    params += [now, events[0].event_type, now]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()}


def pause(
    schedules: QuerySet[Schedule],
    *,
    actor: Any = None,
    reason: str = "",
    until: datetime | None = None,
) -> ChangeCount:
    """Stop active schedules from firing; with ``until`` they resume by themselves then."""
    if until is not None and until.tzinfo is None:
        raise ValidationError(_("Give a timezone-aware time (with an offset or a zone)."))
    if len(reason) > 255:
        raise ValidationError(_("The reason is limited to 255 characters."))
    validate_plain_text(reason)

    def note(schedule: Schedule, now: datetime) -> list[str]:
        if until is not None and until <= now:
            raise ValidationError(_("The pause must end in the future."))
        schedule.paused_reason, schedule.paused_until = reason, until
        return ["paused_reason", "paused_until"]

    return _transition(
        schedules,
        allowed={ScheduleState.ACTIVE},
        target=ScheduleState.PAUSED,
        verb="paused",
        actor=actor,
        change=note,
        reason=reason,
        until=audit.plain(until),
    )


def resume(
    schedules: QuerySet[Schedule], *, actor: Any = None, catch_up: bool = False
) -> ChangeCount:
    """Let paused (or set-aside) schedules fire again.

    By default a schedule goes on from its first slot that runs at or after now: slots that
    passed while it was paused do not fire. With ``catch_up=True`` they are handled by its
    misfire policy, as after downtime (the default, COALESCE, fires the backlog once, then the
    slots that came due within the backlog window one per round).
    A set-aside schedule that still cannot be planned stays set aside (it is skipped); a
    paused one that cannot be planned resumes on its old slot, and the scheduler sets it
    aside with its error (one mechanism for every row that cannot be planned).

    Catching up fires the missed slots: for a user ``actor`` it needs the permission to
    fire (:data:`.permissions.FIRE`; :class:`.NotPermitted`, nothing changed, otherwise).
    """
    if catch_up:
        permissions.require(actor, permissions.FIRE, permissions.CATCH_UP_WHY)
    return _resume(schedules, actor=actor, catch_up=catch_up, at_pause_end=False)


def _resume(
    schedules: QuerySet[Schedule], *, actor: Any, catch_up: bool, at_pause_end: bool
) -> ChangeCount:
    """Resume from now, or (``at_pause_end``) from the end of each schedule's pause: the
    slot at that time and any after it are left to the misfire policy."""

    def replace(schedule: Schedule, now: datetime) -> list[str]:
        since = schedule.resumes_at(now) if at_pause_end else now
        schedule.paused_reason, schedule.paused_until = "", None
        schedule.set_aside_reason, schedule.set_aside_ts = "", None
        fields = ["paused_reason", "paused_until", "set_aside_reason", "set_aside_ts"]
        if not catch_up and schedule.next_slot_ts < since and planning_error(schedule, now) is None:
            schedule.place(since)
            fields += ["next_run_ts", "next_slot_ts", "state", "active"]
        return fields

    return _transition(
        schedules,
        allowed={ScheduleState.PAUSED, ScheduleState.SET_ASIDE},
        target=ScheduleState.ACTIVE,
        verb="resumed",
        actor=actor,
        change=replace,
        accept=lambda schedule, now: (
            schedule.state != ScheduleState.SET_ASIDE or planning_error(schedule, now) is None
        ),
        catch_up=catch_up,
    )


def planning_error(schedule: Schedule, now: datetime | None = None) -> str | None:
    """Why the scheduler could not plan ``schedule`` (as it would set it aside), or None."""
    try:
        table = schedule.timetable()
        table.slot_after(schedule.next_slot_ts)
        table.slot_at_or_before(database_now() if now is None else now)
    except Exception as exc:  # whatever the fire path would trip on
        return reason(exc)
    return None


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


CANCELLABLE = [
    ScheduleState.ACTIVE.value,
    ScheduleState.PAUSED.value,
    ScheduleState.SET_ASIDE.value,
]


class Locked(NamedTuple):
    """A schedule as :func:`cancel_ids` locked it, before the cancel."""

    schedule_id: uuid.UUID
    schedule_name: str
    idempotency_key: str | None
    state: str  # its state under the lock: cancelled now if in CANCELLABLE, else unchanged
    host_id: uuid.UUID


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
        "allowed": CANCELLABLE,
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


def resume_expired_pauses(limit: int = 100) -> int:
    """Resume schedules whose pause ended (the leader calls this every heartbeat).

    Each goes on from the end of its pause, not from now: the slot at that time fires
    (late by at most a heartbeat, within the misfire policy), as do later ones per policy.
    """
    with _atomic():
        due = Schedule.objects.filter(
            state=ScheduleState.PAUSED, paused_until__lte=database_now()
        ).select_for_update(skip_locked=True)[:limit]
        ids = list(due.values_list("pk", flat=True))
        if not ids:
            return 0
        return _resume(
            Schedule.objects.filter(pk__in=ids),
            actor="scheduler",
            catch_up=False,
            at_pause_end=True,
        ).changed


@dataclass(frozen=True)
class EditEffect:
    """What an edit does to when a schedule fires (see :func:`apply_edit`)."""

    placed: bool  # the next slot was recomputed
    completes: bool  # no slot is left within its bounds: it completes now, like a cancel
    fires_now: bool  # its next run is at or before now: it fires at once, like run now
    dropped: datetime | None  # a due slot that will not fire (recorded as a misfire)
    cause: str  # the changed field that brought this about, for error messages


def apply_edit(
    current: Schedule, schedule: Schedule, fields: list[str], now: datetime, *, revive: bool = False
) -> EditEffect:
    """Move ``schedule``'s next run for an edit of ``fields`` from the stored ``current``.

    A change of a field that places slots puts the next run on the first slot of the new
    timetable that runs at or after ``now`` (no backlog); a change of a bound keeps the next
    slot and completes the schedule if it is no longer within its bounds. A paused schedule
    stays paused. ``schedule``'s runtime columns must already be ``current``'s.
    """
    timing = [name for name in fields if name in GRID_FIELDS]
    bounds = [name for name in fields if name in BOUND_FIELDS]
    live = (ScheduleState.ACTIVE, ScheduleState.PAUSED)
    if not (timing or bounds or revive) or schedule.state not in live:
        return EditEffect(False, False, False, None, "")
    state = schedule.state
    if timing or revive:  # a set-aside schedule comes back from now
        _place(schedule, now)
    else:
        schedule.rebound()
    if state == ScheduleState.PAUSED and schedule.state == ScheduleState.ACTIVE:
        schedule.state, schedule.active = state, False
    completes = schedule.state == ScheduleState.COMPLETED
    due = state == ScheduleState.ACTIVE and current.next_run_ts <= now
    moved = completes or schedule.next_slot_ts != current.next_slot_ts
    return EditEffect(
        placed=True,
        completes=completes,
        fires_now=(
            bool(timing or revive)
            and schedule.state == ScheduleState.ACTIVE
            and schedule.next_run_ts <= now
        ),
        dropped=current.next_slot_ts if due and moved else None,
        # A bound is the likelier cause of an end, the timing of a fire.
        cause=((bounds or timing or ["state"]) if completes else (timing or bounds or ["state"]))[
            0
        ],
    )


def _check_permitted(effect: EditEffect, *, may_complete: bool, may_fire: bool) -> None:
    if effect.completes and not may_complete:
        raise EditNotPermitted(
            {
                effect.cause: _(
                    "This change leaves the schedule no slot to fire within its bounds, so it "
                    "would end it now; that needs the permission to cancel schedules."
                )
            },
            code="needs_cancel_permission",
        )
    if effect.fires_now and not may_fire:
        raise EditNotPermitted(
            {
                effect.cause: _(
                    "This change makes the schedule due now, so it would fire at once; that "
                    "needs the permission to run schedules now. Choose a time in the future."
                )
            },
            code="needs_trigger_permission",
        )


def check_edit(
    schedule: Schedule, changed_fields: list[str], *, may_complete: bool, may_fire: bool
) -> EditEffect:
    """What saving ``schedule`` (edited in ``changed_fields``) would do, without saving; raise
    :class:`EditNotPermitted` if it would end or fire the schedule at once and the caller
    may not. ``schedule`` itself is not changed. Locks the row inside a transaction."""
    rows = Schedule.objects.filter(pk=schedule.pk)
    if transaction.get_connection(app_settings.DATABASE).in_atomic_block:
        rows = rows.select_for_update()
    current = rows.first()
    if current is None:
        return EditEffect(False, False, False, None, "")
    candidate = copy.copy(schedule)
    for name in RUNTIME_FIELDS:
        setattr(candidate, name, getattr(current, name))
    fields = [name for name in changed_fields if getattr(current, name) != getattr(schedule, name)]
    effect = apply_edit(current, candidate, fields, database_now())
    _check_permitted(effect, may_complete=may_complete, may_fire=may_fire)
    return effect


def save_schedule(
    schedule: Schedule,
    changed_fields: list[str] | None = None,
    *,
    actor: Any = None,
    expected_version: int | None = None,
    may_complete: bool | None = None,
    may_fire: bool | None = None,
) -> Schedule:
    """Create ``schedule``, or write the ``changed_fields`` of an existing one.

    Validates first (nothing is written when invalid). An edit writes only the fields it
    changed, so it never overwrites what a fire wrote meanwhile; when a field that places
    the slots changed, the next run moves to the first slot of the new timetable that runs
    at or after now (database clock), instead of firing a backlog; a due slot skipped that
    way counts as a misfire, and the audit event names it. With ``expected_version`` (the
    ``aggregate_version`` the editor read) an edit of a schedule that changed since is
    refused with :class:`ConflictError`.

    An edit that would end the schedule now (no slot left within its bounds) is a cancel,
    and one that makes it due now is a run now: with ``may_complete`` / ``may_fire`` False
    it is refused with :class:`EditNotPermitted`, naming the field. Left None they are the
    ``actor``'s permissions to cancel and to run now when it is a user (code is trusted),
    as at every door (:mod:`.permissions`); a new schedule that fires a backlog needs the
    latter too (:class:`.NotPermitted`).
    """
    if may_complete is None:
        may_complete = permissions.may(actor, permissions.CANCEL)
    if may_fire is None:
        may_fire = permissions.may(actor, permissions.FIRE)
    if schedule._state.adding:
        # Validated in Python, one INSERT with its "created" event (schedules.creates);
        # with an idempotency key that exists, the existing schedule.
        # (``may_fire``: a new schedule that would fire a backlog at once is a run now.)
        return creates.create_instance(schedule, actor=actor, may_fire=may_fire)[0]
    schedule.full_clean()
    with _atomic():
        current = Schedule.objects.select_for_update().get(pk=schedule.pk)
        if expected_version is not None and current.aggregate_version != expected_version:
            raise ConflictError(
                _(
                    "This schedule changed since you opened it (version %(then)d, now "
                    "%(now)d): it fired or someone else edited it. Reload it and apply your "
                    "change again."
                )
                % {"then": expected_version, "now": current.aggregate_version},
                code="conflict",
            )
        if current.state == ScheduleState.CANCELLED:
            raise ValidationError(_("A cancelled schedule cannot be edited."), code="cancelled")
        fields = [f for f in (changed_fields or []) if f not in ("state", "active")]
        changes = {
            name: [audit.plain(getattr(current, name)), audit.plain(getattr(schedule, name))]
            for name in fields
            if getattr(current, name) != getattr(schedule, name)
        }
        if not changes:
            return schedule
        now = database_now()
        fields = list(changes)
        # Runtime state is the database's, not the (possibly stale) instance's.
        for name in RUNTIME_FIELDS:
            setattr(schedule, name, getattr(current, name))
        revived = schedule.state == ScheduleState.SET_ASIDE
        if revived:
            # The saved definition passed validation: back into the poll, from now.
            schedule.state = ScheduleState.ACTIVE
            schedule.set_aside_reason, schedule.set_aside_ts = "", None
            changes["state"] = [ScheduleState.SET_ASIDE.value, ScheduleState.ACTIVE.value]
            fields += ["set_aside_reason", "set_aside_ts"]
        effect = apply_edit(current, schedule, fields, now, revive=revived)
        _check_permitted(effect, may_complete=may_complete, may_fire=may_fire)
        details: dict[str, Any] = {}
        if effect.placed:
            fields += ["next_run_ts", "next_slot_ts", "state", "active"]
            if schedule.state != current.state:
                changes["state"] = [current.state, schedule.state]
        if effect.dropped is not None:
            schedule.misfire_count = current.misfire_count + 1
            fields.append("misfire_count")
            details["misfired"] = {
                "slot": audit.plain(effect.dropped),
                "reason": "due when the timing changed; the new timetable goes on from now",
            }
        schedule.aggregate_version = current.aggregate_version + 1
        schedule.updated_ts = now
        schedule.save(update_fields=[*dict.fromkeys(fields), "aggregate_version", "updated_ts"])
        audit.event_for(schedule, "edited", actor=actor, at=now, changes=changes, **details).save()
    return schedule


def _place(schedule: Schedule, now: datetime) -> None:
    """``schedule.place(now)``, refusing a timetable the scheduler could not plan."""
    try:
        schedule.place(now)
    except ValidationError:
        raise
    except Exception as exc:  # whatever the fire path would set the schedule aside for
        raise ValidationError(
            _("The scheduler cannot plan this schedule: %(error)s") % {"error": reason(exc)},
            code="unplannable",
        ) from None


# Columns the fire path writes: an edit takes them from the locked row.
RUNTIME_FIELDS = ("next_run_ts", "next_slot_ts", "state", "active", "fire_count", "misfire_count")


TRIGGERABLE = [ScheduleState.ACTIVE.value, ScheduleState.PAUSED.value]
BACKFILLABLE = [*TRIGGERABLE, ScheduleState.COMPLETED.value]


def _fire(schedule: Schedule, slots: list[datetime], *, trigger: str, actor: Any) -> int:
    """Fire ``slots`` now if the schedule's current state allows it (checked under lock).

    One statement (the row's lock, the events, their outbox messages and the new version),
    whole or absent by itself: no transaction or savepoint of its own, whose BEGIN and
    COMMIT (or SAVEPOINT and RELEASE) would be two more round trips. In a caller's
    transaction the row stays locked until it ends, as it did after the savepoint."""
    states = TRIGGERABLE if trigger == "manual" else BACKFILLABLE
    with connections[app_settings.DATABASE].cursor() as cursor:
        fired = fire_slots(
            cursor,
            schedule.schedule_id,
            slots,
            states=states,
            trigger=trigger,
            actor=audit.actor_name(actor),
        )
    if fired is None:
        raise ValidationError(
            _("This schedule is gone or was cancelled or completed meanwhile; nothing fired."),
            code="state_changed",
        )
    return fired


def trigger(schedule: Schedule, *, actor: Any = None) -> int:
    """Fire ``schedule`` once now, through the exactly-once path (returns 1). A user
    ``actor`` needs the permission to fire (:class:`.NotPermitted` otherwise)."""
    permissions.require(actor, permissions.FIRE)
    if schedule.state not in TRIGGERABLE:
        raise ValidationError(
            _("Only active or paused schedules can be run now; this one is %(state)s.")
            % {"state": schedule.get_state_display()},
            code="not_triggerable",
        )
    return _fire(schedule, [database_now()], trigger="manual", actor=actor)


def backfill(
    schedule: Schedule, start: datetime, end: datetime, *, actor: Any = None
) -> tuple[int, int]:
    """Fire each slot of ``schedule`` in ``[start, end]`` once, now.

    Slots that already fired are not fired again (the database refuses them). Returns
    ``(fired, already_fired)``. A user ``actor`` needs the permission to fire
    (:class:`.NotPermitted` otherwise).
    """
    permissions.require(actor, permissions.FIRE)
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError(_("Give timezone-aware times (with an offset or a zone)."))
    if end < start:
        raise ValidationError(_("The end of the range must not be before its start."))
    if schedule.state == ScheduleState.CANCELLED:
        raise ValidationError(_("A cancelled schedule cannot be backfilled."))
    now = database_now()
    if end > now:
        raise ValidationError(_("A backfill covers the past only; the end is in the future."))
    days = app_settings.RETENTION_DAYS
    if days is not None and start < now - timedelta(days=days):
        # Events older than the retention are deleted, so the database could no longer
        # refuse a slot that already fired: refuse the range instead.
        raise ValidationError(
            _("A backfill cannot reach back past the history retention (%(days)s days).")
            % {"days": days}
        )
    slots = slots_between(schedule, start, end, limit=MAX_BACKFILL + 1)
    if len(slots) > MAX_BACKFILL:
        raise ValidationError(
            _("That range holds more than %(limit)d slots; backfill it in parts.")
            % {"limit": MAX_BACKFILL}
        )
    if not slots:
        return 0, 0
    fired = _fire(schedule, slots, trigger="backfill", actor=actor)
    return fired, len(slots) - fired


def slots_between(
    schedule: Schedule, start: datetime, end: datetime, *, limit: int = 1000
) -> list[datetime]:
    """The schedule's slots in ``[start, end]`` (at most ``limit``), bounds applied."""
    table = schedule.timetable()
    rules = schedule.rules()
    slots: list[datetime] = []
    slot = table.slot_at_or_after(max(start, schedule.start_ts))
    while slot is not None and slot <= end and len(slots) < limit:
        if rules.end is not None and slot > rules.end:
            break
        slots.append(slot)
        slot = table.slot_after(slot)
    return slots
