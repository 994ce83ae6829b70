"""Runs of deliveries: their phases, the status derived from them, and the worker-side hooks.

Each outbox message records the phases of its latest attempt, all on the database clock:

- ``picked_ts``: a relay claimed it (a new claim starts a new attempt and clears the others);
- ``started_ts``: its run started;
- ``completed_ts``: its run completed;
- ``failed_ts``: the attempt failed (its error is ``last_error``).

For transports whose send is the run (in-process handlers, webhooks, Redis, RabbitMQ) the
relay writes them around the send. Transports that hand the work to workers elsewhere (Django
Tasks, Celery: ``Transport.hands_off``) mark the message DELIVERED once the workers have it;
the workers report the run with the hooks below, which ``ExactlyOnceTask`` and the Django Tasks
signals (``apps.py``) call for you::

    from django_dsched.outbox import phases

    phases.report_started(message_id)
    phases.report_completed(message_id)
    phases.report_failed(message_id, "ValueError: bad input")

The message id is the task id (Celery) or ``event["id"]`` of the envelope. The hooks are
idempotent (a repeated report changes nothing, a start after the run completed is ignored),
write one row in autocommit (call them outside a transaction you may roll back), and return
whether the message was found.

:func:`run_status` derives one :class:`~django_dsched.enums.RunStatus` from the phases (the
admin and ``api.status`` use it); :func:`queue_wait` and :func:`run_time` are the durations.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import connections

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus, RunStatus
from django_dsched.models.validators import make_storable_text
from django_dsched.outbox import run_health
from django_dsched.outbox.claims import ERROR_MAX_CHARS
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)

# A (re)start: after a failure (a worker's retry) the run starts again; else the first start
# is kept. Ignored once the run completed.
REPORT_STARTED = """
UPDATE outbox_message_t
SET started_ts = CASE WHEN started_ts IS NULL OR failed_ts IS NOT NULL
                      THEN clock_timestamp() ELSE started_ts END,
    failed_ts = NULL
WHERE id = %(id)s AND completed_ts IS NULL
"""

# A run's end wakes the scheduler (NOTIFY dsched_schedules) when a schedule's slot is held for
# it (its overlap policy, models/overlap.py), so the held slot fires at once rather than at
# the next poll: one primary-key probe of the schedule; a NOTIFY only then.
WAKE = """(SELECT count(*) FROM (SELECT pg_notify('dsched_schedules', '') FROM reported r
                                JOIN schedule_t s
                                  ON s.schedule_id = r.schedule_id AND s.held_by = r.id) n)"""

# A completion and a failure also keep the schedule's runs in a row (run_health); each
# returns a row when the message was changed. A failure counts once (a repeated report of
# it is no news); a completion resets the row.
REPORT_COMPLETED = f"""
WITH reported AS (
    UPDATE outbox_message_t
    SET completed_ts = COALESCE(completed_ts, clock_timestamp()),
        started_ts = COALESCE(started_ts, clock_timestamp()),
        failed_ts = NULL
    WHERE id = %(id)s
    RETURNING id, aggregate_id AS schedule_id, completed_ts AS outcome_ts, true AS counts
),{run_health.after_report("reported", failed=False)}
SELECT 1, {WAKE} FROM reported
"""

REPORT_FAILED = f"""
WITH earlier AS (
    SELECT id, failed_ts IS NULL AS counts FROM outbox_message_t
    WHERE id = %(id)s AND completed_ts IS NULL
    FOR UPDATE
),
reported AS (
    UPDATE outbox_message_t m
    SET failed_ts = clock_timestamp(),
        started_ts = COALESCE(m.started_ts, clock_timestamp()),
        last_error = %(error)s
    FROM earlier e
    WHERE m.id = e.id AND m.id = %(id)s
    RETURNING m.id, m.aggregate_id AS schedule_id, m.failed_ts AS outcome_ts, e.counts
),{run_health.after_report("reported", failed=True)}
SELECT 1, {WAKE} FROM reported
"""

EXISTS = "SELECT 1 FROM outbox_message_t WHERE id = %(id)s"


def _message_id(message_id: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(message_id, uuid.UUID):
        return message_id
    try:
        return uuid.UUID(str(message_id))
    except ValueError:
        return None  # not a dsched message id (a task some other code sent)


def _report(sql: str, params: dict[str, Any], using: str | None) -> bool:
    alias = using or app_settings.DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.rowcount:
            return True
        cursor.execute(EXISTS, params)  # found, but the report changed nothing
        return cursor.fetchone() is not None


def report_started(message_id: uuid.UUID | str, *, using: str | None = None) -> bool:
    """A worker started running the message's work."""
    id_ = _message_id(message_id)
    return id_ is not None and _report(REPORT_STARTED, {"id": id_}, using)


def report_completed(message_id: uuid.UUID | str, *, using: str | None = None) -> bool:
    """A worker's run of the message's work completed (final: later failures are ignored)."""
    id_ = _message_id(message_id)
    return id_ is not None and _report(REPORT_COMPLETED, {"id": id_}, using)


def report_failed(message_id: uuid.UUID | str, error: str, *, using: str | None = None) -> bool:
    """A worker's run failed with ``error`` (stored as the message's last error)."""
    id_ = _message_id(message_id)
    text = make_storable_text(error or "failed", ERROR_MAX_CHARS)
    return id_ is not None and _report(REPORT_FAILED, {"id": id_, "error": text}, using)


def report_quietly(report: Callable[..., bool], *args: Any) -> None:
    """Call a report hook from a worker without letting a database error fail the work."""
    try:
        report(*args)
    except Exception:
        logger.warning("could not report the run of message %s", args[0], exc_info=True)


class Phased(Protocol):
    """What the status is derived from: an OutboxMessage, or a row of its values."""

    @property
    def status(self) -> str: ...
    @property
    def picked_ts(self) -> datetime | None: ...
    @property
    def started_ts(self) -> datetime | None: ...
    @property
    def completed_ts(self) -> datetime | None: ...
    @property
    def failed_ts(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class Phases:
    status: str
    picked_ts: datetime | None = None
    started_ts: datetime | None = None
    completed_ts: datetime | None = None
    failed_ts: datetime | None = None


def run_status(message: Phased) -> RunStatus:
    """The run's status from its delivery status and phases (the latest attempt's)."""
    if message.status == DeliveryStatus.DELIVERY_FAILED:
        return RunStatus.DEAD
    if message.completed_ts is not None:
        return RunStatus.SUCCEEDED
    if message.status == DeliveryStatus.DELIVERED:
        if message.failed_ts is not None:
            return RunStatus.FAILED
        return RunStatus.RUNNING if message.started_ts is not None else RunStatus.HANDED_OFF
    # PENDING
    if message.failed_ts is not None:
        return RunStatus.RETRYING
    if message.started_ts is not None:
        return RunStatus.RUNNING
    return RunStatus.PICKED if message.picked_ts is not None else RunStatus.PENDING


def queue_wait(event_ts: datetime | None, picked_ts: datetime | None) -> timedelta | None:
    """From the fire to the latest claim."""
    return None if event_ts is None or picked_ts is None else picked_ts - event_ts


def run_time(
    started_ts: datetime | None, completed_ts: datetime | None, failed_ts: datetime | None = None
) -> timedelta | None:
    """From the start of the run to its end (completed, or failed)."""
    end = completed_ts or failed_ts
    return None if started_ts is None or end is None else end - started_ts
