"""The pauses that end by themselves: the leader resumes them, and no one of them can keep
the others paused.

Every heartbeat the leader (:mod:`django_dsched.scheduler.housekeeping`) resumes up to
``limit`` schedules whose ``paused_until`` has come, in its loop's transaction. A row the
database refuses to resume (a constraint or trigger added by hand, a value out of range), or
one that cannot be read or planned (a time at the edge of its type written by hand), would
fail that statement for all of them; so they are written in halves, each under a savepoint,
until each such row is alone (the fire path's narrowing, ``firing/write.py``). Each is then
set aside with its error, by a statement that reads nothing of the row into Python, so the
admin, ``dsched show`` and ``api.status`` show why; the others resume in the same
transaction. A row the database refuses to set aside as well is returned as *passed over*:
the leader leaves it out of its resumes for a while (logged), then tries it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError, DataError, connections, transaction

from django_dsched.changes.pauses import resume_at_pause_end
from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import ConflictError
from django_dsched.firing.plan import REASON_MAX, reason
from django_dsched.firing.write import HELD, KEPT_TIMES
from django_dsched.history.event_ids import change_sql
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.runtime.narrowing import halves
from django_dsched.runtime.refusals import refusal, refused, sqlstate

# What a set-aside pause's error starts with.
NOT_RESUMED = "could not resume at the end of its pause: "

# One paused row out of the poll with its error, and its audit event, without reading the
# row into Python (it may hold a value Python cannot read). Its times are made storable as
# the fire path's set-aside makes them (a row written before the range CHECK could not be
# written at all otherwise), and the reason names what it held.
SET_ASIDE = f"""
WITH aside AS (
    UPDATE schedule_t s
    SET state = %(set_aside)s, active = false,
        set_aside_reason = left(%(reason)s || COALESCE(' (' || NULLIF({HELD}, '') || ')', ''),
                                {REASON_MAX}),
        set_aside_ts = statement_timestamp(), aggregate_version = s.aggregate_version + 1,
        updated_ts = statement_timestamp(),
        {KEPT_TIMES}
    WHERE s.schedule_id = %(id)s AND s.state = %(paused)s
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.origin, s.aggregate_version,
              s.set_aside_reason AS reason
)
INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                           event_type, event_ts, payload, metadata)
SELECT {change_sql("statement_timestamp()")}, host_id, schedule_id, 'Schedule',
       aggregate_version, 'dsched.schedule.set_aside', statement_timestamp(),
       jsonb_build_object(
           'actor', 'scheduler', 'at', statement_timestamp(), 'error', reason,
           'changes', jsonb_build_object(
               'state', jsonb_build_array(%(paused)s::text, %(set_aside)s::text))),
       jsonb_build_object('actor', 'scheduler', 'schedule_name', schedule_name,
                          'origin', origin)
FROM aside
"""


@dataclass(frozen=True, slots=True)
class PausesEnded:
    """What one call of :func:`resume_expired_pauses` did."""

    resumed: int = 0
    # (schedule id, error): set aside, or left paused because the database refused that too.
    set_aside: tuple[tuple[str, str], ...] = ()
    passed_over: tuple[tuple[str, str], ...] = ()


def resume_expired_pauses(limit: int = 100, *, skip: Sequence[str] = ()) -> PausesEnded:
    """Resume up to ``limit`` schedules whose pause ended (the leader, every heartbeat), but
    those in ``skip`` (passed over for now).

    Each goes on from the end of its pause, not from now: the slot at that time fires
    (late by at most a heartbeat, within the misfire policy), as do later ones per policy.
    A row that cannot be resumed is set aside with its error; the others resume.
    """
    using = app_settings.DATABASE
    with transaction.atomic(using=using):
        due = (
            Schedule.objects.filter(state=ScheduleState.PAUSED, paused_until__lte=database_now())
            .exclude(pk__in=list(skip))
            .select_for_update(skip_locked=True)
            .order_by("pk")
        )
        ids = [str(pk) for pk in due.values_list("pk", flat=True)[:limit]]
        if not ids:
            return PausesEnded()
        resumed, faulty = _resume_narrowing(ids, using)
        aside, passed_over = [], []
        for schedule_id, why in faulty:
            refused_too = _set_aside(schedule_id, NOT_RESUMED + why, using)
            if refused_too is None:
                aside.append((schedule_id, NOT_RESUMED + why))
            else:
                passed_over.append((schedule_id, refused_too))
    return PausesEnded(resumed, tuple(aside), tuple(passed_over))


def _resume_narrowing(ids: list[str], using: str) -> tuple[int, list[tuple[str, str]]]:
    """Resume ``ids`` from their pause's end, under savepoints, in halves while a part
    fails for one row's sake; the rows resumed and the rows that failed alone (with why)."""

    def resume(part: list[str]) -> list[int]:
        return [resume_at_pause_end(Schedule.objects.filter(pk__in=part)).changed]

    resumed, faulty = halves(using, resume, ids, fault=_one_rows_fault, describe=_why)
    return sum(resumed), faulty


def _one_rows_fault(exc: BaseException) -> bool:
    """Whether ``exc`` can be one row's fault: the database refusing its data
    (:func:`~django_dsched.runtime.refusals.refused`), a value the driver cannot turn into
    Python (a ``DataError`` raised in the client, with no SQLSTATE), or anything but a
    database error raised while planning it. A lost connection, a lock wait given up or a
    row that kept changing are not: they go to the caller."""
    if isinstance(exc, ConflictError):
        return False
    if not isinstance(exc, DatabaseError):
        return True
    return refused(exc) or (isinstance(exc, DataError) and sqlstate(exc) is None)


def _why(exc: BaseException) -> str:
    return refusal(exc, REASON_MAX) if refused(exc) else reason(exc)


def _set_aside(schedule_id: str, why: str, using: str) -> str | None:
    """Set one paused row aside with ``why`` (under a savepoint); None once done, else the
    database's refusal of that too."""
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            cursor.execute(
                SET_ASIDE,
                {
                    "id": schedule_id,
                    "reason": why[:REASON_MAX],
                    "paused": ScheduleState.PAUSED.value,
                    "set_aside": ScheduleState.SET_ASIDE.value,
                },
            )
    except DatabaseError as exc:
        if not refused(exc):
            raise
        return refusal(exc, REASON_MAX)
    return None
