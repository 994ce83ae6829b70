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

    # Delayed messages: no name needed; a key makes the create idempotent.
    api.create_once(delay=timedelta(minutes=15), topic="mail", event_type="reminder.send",
                    key="order-42:reminder")
    api.status(key="order-42:reminder").message_status  # PENDING, DELIVERED, ...
    api.bulk_create([api.Once(at=deadline, topic="payments", event_type="payment.expire",
                              key=f"pay-{n}") for n, deadline in deadlines])
    api.bulk_cancel(keys=["pay-1", "pay-2"])

A create is one statement (two when it must read the database's clock), a cancel one, a
pause or a resume two; docs/python-api.md has the costs, the key rules and the bulk calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, OuterRef, Q, QuerySet, Subquery, When
from django.utils.translation import gettext as _

from django_dsched.changes import bulk, cancels, creates, on_demand, pauses, permissions
from django_dsched.changes.specs import OPTIONS, Cron, Interval, Once, Spec
from django_dsched.counts import ChangeCount
from django_dsched.enums import LIVE, PLANNED, DeliveryStatus
from django_dsched.exceptions import BulkValidationError, ValidationError
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.models.validators import storable_text
from django_dsched.outbox import phases
from django_dsched.runtime.clock import database_now

ScheduleRef = Schedule | uuid.UUID | str


def _lookup(
    ref: ScheduleRef | None, key: str | None, host_id: uuid.UUID | str | None
) -> QuerySet[Schedule]:
    """The schedule ``ref`` or ``key`` names, as a query (run by the caller: no round trip)."""
    if (ref is None) == (key is None):
        raise ValidationError(_("Name a schedule, or give key=; not both."), code="ref_or_key")
    if isinstance(ref, Schedule):
        return Schedule.objects.filter(pk=ref.pk)
    queryset = Schedule.objects.for_host(resolve_host(host_id))
    if key is not None:
        if isinstance(key, str) and not storable_text(key):
            return queryset.none()  # no key holds a NUL or a lone surrogate
        return queryset.filter(idempotency_key=key)
    if isinstance(ref, uuid.UUID):
        return queryset.filter(pk=ref)
    assert ref is not None
    if not storable_text(ref):  # PostgreSQL text cannot hold it: no name has it
        return queryset.none()
    try:
        schedule_id = uuid.UUID(ref)
    except ValueError:
        return queryset.filter(schedule_name=ref)
    # An id, or else a name: the schedule with that id wins, in the same query.
    first = (
        queryset.filter(Q(pk=schedule_id) | Q(schedule_name=ref))
        .order_by(Case(When(pk=schedule_id, then=0), default=1))
        .values("pk")[:1]
    )
    return Schedule.objects.filter(pk=Subquery(first))


def get(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
) -> Schedule:
    """A schedule by instance, id, name or idempotency ``key`` (within ``host_id``, default
    DSCHED_DEFAULT_HOST_ID). One query."""
    if isinstance(ref, Schedule):
        return ref
    try:
        return _lookup(ref, key, host_id).get()
    except Schedule.DoesNotExist:
        what = f"with key {key!r}" if key is not None else f"named {ref!r}"
        raise Schedule.DoesNotExist(f"No schedule {what}.") from None


def _changed(count: ChangeCount, ref: ScheduleRef | None, key: str | None) -> bool:
    if count.changed + count.skipped == 0:
        what = f"with key {key!r}" if key is not None else f"named {ref!r}"
        raise Schedule.DoesNotExist(f"No schedule {what}.")
    return bool(count.changed)


def _options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(f"Unknown options: {', '.join(sorted(unknown))}.")
    return options


def create_interval(
    name: str | None = None,
    *,
    every: int | timedelta,
    unit: str | None = None,
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    start: datetime | None = None,
    time_zone: str | None = None,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire every ``every`` ``unit`` (SECONDS ... YEARS; default MINUTES), on a grid anchored
    at ``start``; or every ``every=timedelta(...)`` (a duration, no ``unit``).

    ``options``: ``end``, ``max_fires``, ``misfire_policy``, ``misfire_grace_seconds``,
    ``catch_up_limit``, ``jitter_seconds``, ``priority``. With ``key``, a schedule of this
    host with that key is returned as it is instead of creating a second one.
    """
    spec = Interval(
        name=name,
        every=every,
        unit=unit,
        topic=topic,
        event_type=event_type,
        data=data,
        start=start,
        time_zone=time_zone,
        key=key,
        host_id=host_id,
        **_options(options),
    )
    permissions.require(actor, permissions.ADD)
    return creates.create(spec, actor=actor)


def create_cron(
    name: str | None = None,
    *,
    cron: str,
    time_zone: str = "UTC",
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    start: datetime | None = None,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire at the matches of a cron expression on the wall clock of ``time_zone``."""
    spec = Cron(
        name=name,
        cron=cron,
        time_zone=time_zone,
        topic=topic,
        event_type=event_type,
        data=data,
        start=start,
        key=key,
        host_id=host_id,
        **_options(options),
    )
    permissions.require(actor, permissions.ADD)
    return creates.create(spec, actor=actor)


def create_once(
    name: str | None = None,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    topic: str,
    event_type: str,
    data: dict[str, Any] | None = None,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
    **options: Any,
) -> Schedule:
    """Fire once, at ``at`` or after ``delay`` (database clock); then it is completed.

    A delayed message needs no name: it defaults to ``key``, else to the schedule's id.
    """
    spec = Once(
        name=name,
        at=at,
        delay=delay,
        topic=topic,
        event_type=event_type,
        data=data,
        key=key,
        host_id=host_id,
        **_options(options),
    )
    permissions.require(actor, permissions.ADD)
    return creates.create(spec, actor=actor)


def pause(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    reason: str = "",
    until: datetime | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> bool:
    """Pause; with ``until`` it resumes by itself then. False if it was not active."""
    permissions.require(actor, permissions.PAUSE)
    selected = _lookup(ref, key, host_id)
    return _changed(pauses.pause(selected, actor=actor, reason=reason, until=until), ref, key)


def resume(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    catch_up: bool = False,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> bool:
    """Resume from now (or, with ``catch_up``, per the misfire policy). Also takes back a
    set-aside schedule once it can be planned. False if nothing was resumed."""
    permissions.require(actor, permissions.PAUSE)  # catching up: the service asks FIRE
    selected = _lookup(ref, key, host_id)
    return _changed(pauses.resume(selected, actor=actor, catch_up=catch_up), ref, key)


def cancel(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> bool:
    """Cancel for good (by instance, id, name, or idempotency ``key``). False if it was
    already cancelled or completed."""
    permissions.require(actor, permissions.CANCEL)
    return _changed(cancels.cancel(_lookup(ref, key, host_id), actor=actor), ref, key)


def trigger(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> int:
    """Fire once now, through the exactly-once path (by instance, id, name, or idempotency
    ``key``). Three round trips: the schedule, the database's clock, the fire."""
    return on_demand.trigger(get(ref, key=key, host_id=host_id), actor=actor)


def backfill(
    ref: ScheduleRef,
    start: datetime,
    end: datetime,
    *,
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> tuple[int, int]:
    """Fire each past slot in ``[start, end]`` once; returns ``(fired, already_fired)``."""
    return on_demand.backfill(get(ref, host_id=host_id), start, end, actor=actor)


def bulk_create(specs: Iterable[Spec | Schedule], *, actor: Any = None) -> list[Schedule]:
    """Create many schedules, all or nothing (:func:`django_dsched.changes.bulk.bulk_create`
    has the rules and the costs)."""
    permissions.require(actor, permissions.ADD)
    return bulk.bulk_create(specs, actor=actor)


def bulk_cancel(
    refs: Iterable[ScheduleRef] = (),
    *,
    keys: Iterable[str] = (),
    host_id: uuid.UUID | str | None = None,
    actor: Any = None,
) -> ChangeCount:
    """Cancel many schedules, all or nothing (:func:`django_dsched.changes.bulk.bulk_cancel`
    has the rules): how many were cancelled, and skipped (already ended)."""
    permissions.require(actor, permissions.CANCEL)
    return bulk.bulk_cancel(refs, keys=keys, host_id=host_id, actor=actor)


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
    # The newest message's run (outbox.phases): derived status and phases (database times).
    last_run: str | None = None
    last_picked: datetime | None = None
    last_started: datetime | None = None
    last_completed: datetime | None = None
    last_failed: datetime | None = None
    key: str | None = None
    # Seed 001's status of a delayed message: the newest fire's delivery (PENDING,
    # DELIVERED, DELIVERY_FAILED); PENDING too while it has not fired and still will;
    # else the schedule's state (CANCELLED, COMPLETED).
    message_status: str = DeliveryStatus.PENDING


def status(
    ref: ScheduleRef | None = None,
    *,
    key: str | None = None,
    host_id: uuid.UUID | str | None = None,
) -> Status:
    """Where a schedule stands: state, next and last fire, last delivery result, counts.

    By instance, id, name, or idempotency ``key``; one query (the schedule and its newest
    message together)."""
    newest = OutboxMessage.objects.filter(aggregate_id=OuterRef("pk")).order_by(
        "-aggregate_version"
    )
    selected = Schedule.objects.filter(pk=ref.pk) if isinstance(ref, Schedule) else None
    try:
        schedule = (
            (selected if selected is not None else _lookup(ref, key, host_id))
            .annotate(
                dsched_delivery=Subquery(newest.values("status")[:1]),
                dsched_delivery_error=Subquery(newest.values("last_error")[:1]),
                **{f"dsched_{name}": Subquery(newest.values(name)[:1]) for name in _PHASES},
            )
            .get()
        )
    except Schedule.DoesNotExist:
        what = f"with key {key!r}" if key is not None else f"named {ref!r}"
        raise Schedule.DoesNotExist(f"No schedule {what}.") from None
    delivery: str | None = schedule.dsched_delivery
    latest = (
        None
        if delivery is None
        else {
            "status": delivery,
            "last_error": schedule.dsched_delivery_error,
            **{name: getattr(schedule, f"dsched_{name}") for name in _PHASES},
        }
    )
    if delivery is not None:
        message_status = delivery
    elif schedule.state in LIVE:
        message_status = DeliveryStatus.PENDING
    else:
        message_status = schedule.state
    return Status(
        key=schedule.idempotency_key,
        message_status=message_status,
        schedule_id=schedule.schedule_id,
        name=schedule.schedule_name,
        state=schedule.state,
        next_fire=schedule.next_run_ts if schedule.state in PLANNED else None,
        last_fired=schedule.last_fired_ts,
        last_delivery=latest["status"] if latest else None,
        # Why the newest fire's message failed: an error kept from a retry that then
        # succeeded is not one (the message's own last_error keeps it).
        last_error=(latest["last_error"] or "")
        if latest and latest["status"] != DeliveryStatus.DELIVERED
        else "",
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
    run = phases.Phases(latest["status"], *(latest[k] for k in _PHASES))
    return {
        "last_run": phases.run_status(run).value,
        **{f"last_{k.removesuffix('_ts')}": latest[k] for k in _PHASES},
    }


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
            for slot in on_demand.slots_between(schedule, begin, end, limit=limit_per_schedule)
        ]
    return sorted(fires, key=lambda item: (item[1], item[0]))


def schedules(
    *, host_id: uuid.UUID | str | None = None, state: str | None = None
) -> QuerySet[Schedule]:
    """The host's schedules (all states, or one), in next-run order."""
    queryset = Schedule.objects.for_host(resolve_host(host_id)).order_by("next_run_ts")
    return queryset if state is None else queryset.filter(state=state)


__all__ = [
    "BulkValidationError",
    "Cron",
    "DeliveryStatus",
    "Interval",
    "Once",
    "Status",
    "backfill",
    "bulk_cancel",
    "bulk_create",
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
