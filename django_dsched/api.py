"""The public Python API: create, control and inspect schedules.

Every function works inside the caller's transaction (a schedule created in a transaction
that rolls back never existed) and validates before writing (:class:`ValidationError`,
nothing written). Schedules are looked up by instance, id, or name within a host.

.. code-block:: python

    from django_dsched import api

    api.create_cron("nightly-report", cron="0 2 * * *", time_zone="Europe/Brussels",
                    topic="reports", event_type="report.build", data={"format": "pdf"})
    api.create_interval("heartbeat", every=30, unit="SECONDS", topic="ops", event_type="ping")
    api.create_once("send-reminder", delay=timedelta(minutes=15), topic="mail",
                    event_type="reminder.send", data={"user": 42})
    api.pause("nightly-report", reason="quarter close", until=datetime(2026, 12, 1, tzinfo=UTC))
    api.status("nightly-report").next_fire
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from django_dsched import services
from django_dsched.clock import database_now
from django_dsched.enums import DeliveryStatus, ScheduleKind, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.outbox import runs

ScheduleRef = Schedule | uuid.UUID | str


def get(ref: ScheduleRef, *, host_id: uuid.UUID | str | None = None) -> Schedule:
    """A schedule by instance, id, or name (within ``host_id``, default DSCHED_DEFAULT_HOST_ID)."""
    if isinstance(ref, Schedule):
        return ref
    queryset = Schedule.objects.for_host(resolve_host(host_id))
    if isinstance(ref, uuid.UUID):
        return queryset.get(pk=ref)
    try:
        return queryset.get(pk=uuid.UUID(ref))
    except (ValueError, Schedule.DoesNotExist):
        if "\x00" in ref:  # PostgreSQL text cannot hold NUL: no name has one
            raise Schedule.DoesNotExist(f"No schedule named {ref!r}.") from None
        return queryset.get(schedule_name=ref)


def _select(ref: ScheduleRef, host_id: uuid.UUID | str | None) -> QuerySet[Schedule]:
    return Schedule.objects.filter(pk=get(ref, host_id=host_id).pk)


def _create(
    name: str,
    kind: str,
    *,
    topic: str,
    event_type: str,
    data: Any,
    host_id: uuid.UUID | str | None,
    actor: Any,
    **fields: Any,
) -> Schedule:
    schedule = Schedule(
        schedule_name=name,
        schedule_kind=kind,
        host_id=resolve_host(host_id),
        event_topic=topic,
        event_type=event_type,
        event_data={} if data is None else data,
        origin=ScheduleOrigin.API,
        **fields,
    )
    return services.save_schedule(schedule, actor=actor)


def create_interval(
    name: str,
    *,
    every: int,
    unit: str = "MINUTES",
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    start: datetime | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire every ``every`` ``unit`` (SECONDS ... YEARS), on a grid anchored at ``start``.

    ``options``: ``end_ts``, ``max_fires``, ``misfire_policy``, ``misfire_grace_seconds``,
    ``catch_up_limit``, ``jitter_seconds``, ``priority``.
    """
    return _create(
        name,
        ScheduleKind.INTERVAL,
        topic=topic,
        event_type=event_type,
        data=data,
        host_id=host_id,
        actor=actor,
        frequency_unit=unit,
        frequency_time=every,
        start_ts=start,
        **options,
    )


def create_cron(
    name: str,
    *,
    cron: str,
    time_zone: str = "UTC",
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    start: datetime | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire at the matches of a cron expression on the wall clock of ``time_zone``."""
    return _create(
        name,
        ScheduleKind.CRON,
        topic=topic,
        event_type=event_type,
        data=data,
        host_id=host_id,
        actor=actor,
        cron_expression=cron,
        time_zone=time_zone,
        start_ts=start,
        **options,
    )


def create_once(
    name: str,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire once, at ``at`` or after ``delay`` (database clock); then it is completed."""
    if (at is None) == (delay is None):
        raise ValidationError("Give either at= or delay=.")
    if delay is not None:
        if delay < timedelta(0):
            raise ValidationError("The delay must not be negative.")
        at = database_now() + delay
    return _create(
        name,
        ScheduleKind.ONCE,
        topic=topic,
        event_type=event_type,
        data=data,
        host_id=host_id,
        actor=actor,
        start_ts=at,
        **options,
    )


def pause(
    ref: ScheduleRef,
    *,
    reason: str = "",
    until: datetime | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> bool:
    """Pause; with ``until`` it resumes by itself then. False if it was not active."""
    return bool(
        services.pause(_select(ref, host_id), actor=actor, reason=reason, until=until).changed
    )


def resume(
    ref: ScheduleRef,
    *,
    catch_up: bool = False,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> bool:
    """Resume from now (or, with ``catch_up``, per the misfire policy). Also takes back a
    set-aside schedule once it can be planned. False if nothing was resumed."""
    return bool(services.resume(_select(ref, host_id), actor=actor, catch_up=catch_up).changed)


def cancel(ref: ScheduleRef, *, host_id: uuid.UUID | str | None = None, actor: Any = None) -> bool:
    """Cancel for good. False if it was already cancelled or completed."""
    return bool(services.cancel(_select(ref, host_id), actor=actor).changed)


def trigger(ref: ScheduleRef, *, host_id: uuid.UUID | str | None = None, actor: Any = None) -> int:
    """Fire once now, through the exactly-once path."""
    return services.trigger(get(ref, host_id=host_id), actor=actor)


def backfill(
    ref: ScheduleRef,
    start: datetime,
    end: datetime,
    *,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> tuple[int, int]:
    """Fire each past slot in ``[start, end]`` once; returns ``(fired, already_fired)``."""
    return services.backfill(get(ref, host_id=host_id), start, end, actor=actor)


@dataclass(frozen=True)
class Status:
    schedule_id: uuid.UUID
    name: str
    state: str
    next_fire: datetime | None
    last_fired: datetime | None
    last_delivery: str | None  # the newest message's delivery status, if any
    last_error: str
    fire_count: int
    misfire_count: int
    paused_reason: str
    paused_until: datetime | None
    version: int
    # Set when the scheduler set the schedule aside (state SET_ASIDE): why, and when.
    set_aside_reason: str = ""
    set_aside_at: datetime | None = None
    # The newest message's run (outbox.runs): derived status and phases (database times).
    last_run: str | None = None
    last_picked: datetime | None = None
    last_started: datetime | None = None
    last_completed: datetime | None = None
    last_failed: datetime | None = None


def status(ref: ScheduleRef, *, host_id: uuid.UUID | str | None = None) -> Status:
    """Where a schedule stands: state, next and last fire, last delivery result, counts."""
    schedule = get(ref, host_id=host_id)
    latest = (
        OutboxMessage.objects.filter(aggregate_id=schedule.schedule_id)
        .order_by("-aggregate_version")
        .values("status", "last_error", *_PHASES)
        .first()
    )
    return Status(
        schedule_id=schedule.schedule_id,
        name=schedule.schedule_name,
        state=schedule.state,
        next_fire=schedule.next_run_ts if schedule.state in _WILL_FIRE else None,
        last_fired=schedule.last_fired_ts,
        last_delivery=latest["status"] if latest else None,
        last_error=(latest["last_error"] or "") if latest else "",
        fire_count=schedule.fire_count,
        misfire_count=schedule.misfire_count,
        paused_reason=schedule.paused_reason,
        paused_until=schedule.paused_until,
        version=schedule.aggregate_version,
        set_aside_reason=schedule.set_aside_reason,
        set_aside_at=schedule.set_aside_ts,
        **_run_fields(latest),
    )


_PHASES = ("picked_ts", "started_ts", "completed_ts", "failed_ts")


def _run_fields(latest: dict[str, Any] | None) -> dict[str, Any]:
    """``Status``'s fields on the newest message's run (none: no message yet)."""
    if not latest:
        return {}
    phases = runs.Phases(latest["status"], *(latest[k] for k in _PHASES))
    return {
        "last_run": runs.run_status(phases).value,
        **{f"last_{k.removesuffix('_ts')}": latest[k] for k in _PHASES},
    }


_WILL_FIRE = (ScheduleState.ACTIVE, ScheduleState.PAUSED)


def preview(
    ref: ScheduleRef, count: int = 10, *, host_id: uuid.UUID | str | None = None
) -> list[datetime]:
    """The next ``count`` fire times, computed by the code that fires the schedule (a paused
    schedule's from where it resumes: the end of its pause, or now)."""
    if not 1 <= count <= 1000:
        raise ValidationError("count must be from 1 to 1000.")
    return get(ref, host_id=host_id).preview(count, database_now())


def dry_run(
    start: datetime,
    end: datetime,
    *,
    host_id: uuid.UUID | str | None = None,
    limit_per_schedule: int = 1000,
) -> list[tuple[str, datetime]]:
    """What would fire between ``start`` and ``end``: ``(schedule name, slot)`` in time order.

    Active schedules of the host, from each one's next slot on; nothing is written.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError("Give timezone-aware times.")
    fires: list[tuple[str, datetime]] = []
    for schedule in Schedule.objects.for_host(resolve_host(host_id)).active():
        begin = max(start, schedule.next_slot_ts)
        fires += [
            (schedule.schedule_name, slot)
            for slot in services.slots_between(schedule, begin, end, limit=limit_per_schedule)
        ]
    return sorted(fires, key=lambda item: (item[1], item[0]))


def schedules(
    *, host_id: uuid.UUID | str | None = None, state: str | None = None
) -> QuerySet[Schedule]:
    """The host's schedules (all states, or one), in next-run order."""
    queryset = Schedule.objects.for_host(resolve_host(host_id)).order_by("next_run_ts")
    return queryset if state is None else queryset.filter(state=state)


__all__ = [
    "DeliveryStatus",
    "Status",
    "backfill",
    "cancel",
    "create_cron",
    "create_interval",
    "create_once",
    "dry_run",
    "get",
    "pause",
    "preview",
    "resume",
    "schedules",
    "status",
    "trigger",
]
