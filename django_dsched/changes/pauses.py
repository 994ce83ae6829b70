"""Pausing and resuming schedules, and the pauses that end by themselves.

Each change runs inside the caller's transaction when there is one (else in one of its own
when it changes several rows), writes each row only if it is still as read (compare-and-set,
:func:`_transition`), bumps ``aggregate_version`` and writes an audit event with that
version (:mod:`.audit`), so a rolled-back caller leaves nothing behind and every change is
in the schedule's history.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.models import DateTimeField, Field, Func, QuerySet
from django.utils.translation import gettext as _

from django_dsched.changes import audit, permissions
from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import ConflictError, ValidationError
from django_dsched.firing.plan import reason
from django_dsched.history import horizon
from django_dsched.models import Event, Schedule
from django_dsched.models.validators import validate_aware, validate_plain_text
from django_dsched.runtime.clock import database_now


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
    validate_aware(until)  # aware, and a time a row may hold (models/times.py)
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
    slot at that time and any after it are left to the misfire policy. Never from before
    the history's horizon: a purge may have deleted the record of a slot fired before it
    (a backfill while paused), and nothing would refuse it again (history/horizon.py)."""
    floor = horizon.complete_since() if catch_up or at_pause_end else None  # now is after it

    def replace(schedule: Schedule, now: datetime) -> list[str]:
        since = schedule.resumes_at(now) if at_pause_end else now
        since = schedule.next_slot_ts if catch_up else since
        since = since if floor is None else max(since, floor)
        schedule.paused_reason, schedule.paused_until = "", None
        schedule.set_aside_reason, schedule.set_aside_ts = "", None
        fields = ["paused_reason", "paused_until", "set_aside_reason", "set_aside_ts"]
        if schedule.next_slot_ts < since and planning_error(schedule, now) is None:
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


def resume_at_pause_end(schedules: QuerySet[Schedule]) -> ChangeCount:
    """Resume paused schedules whose pause ended from the end of their pause (the slot at
    that time fires, later ones per the misfire policy), as the scheduler does
    (:mod:`.pause_ends`)."""
    return _resume(schedules, actor="scheduler", catch_up=False, at_pause_end=True)
