"""Where a schedule stands (``api.status``): its state, health, next and last fire, and its
newest message's delivery and run, read in one query."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from django_dsched.enums import LIVE, PLANNED, DeliveryStatus, Health, OverlapPolicy
from django_dsched.health import judge
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.outbox import phases

# The annotations of the newest message's delivery status and error.
DELIVERY, DELIVERY_ERROR = "dsched_delivery", "dsched_delivery_error"


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
    # Its health (django_dsched.health): OK, NEW, LATE, STUCK, FAILING, PAUSED, SET_ASIDE or
    # ENDED; since when (None for OK), why, and the error behind it (a failing run's, the
    # set-aside reason); its last run that succeeded, when recorded (schedules that failed
    # or are monitored).
    health: str = Health.OK
    health_since: datetime | None = None
    health_reason: str = ""
    health_error: str = ""
    last_success: datetime | None = None
    # The overlap and failure policies (docs/overlap.md), what they did, and the run the
    # next slot is held for (None: none).
    overlap_policy: str = OverlapPolicy.ALLOW_ALL
    pause_on_failure: bool = False
    skip_count: int = 0
    buffer_count: int = 0
    held_for: uuid.UUID | None = None


def annotated(schedules: QuerySet[Schedule]) -> QuerySet[Schedule]:
    """``schedules`` with their health and their newest message's delivery and phases, as
    :func:`status_of` reads them."""
    newest = OutboxMessage.objects.filter(aggregate_id=OuterRef("pk")).order_by(
        "-aggregate_version"
    )
    return judge.with_health(schedules).annotate(
        **{DELIVERY: Subquery(newest.values("status")[:1])},
        **{DELIVERY_ERROR: Subquery(newest.values("last_error")[:1])},
        **{f"dsched_{name}": Subquery(newest.values(name)[:1]) for name in _PHASES},
    )


def status_of(schedule: Schedule) -> Status:
    """The status of a schedule read through :func:`annotated`."""
    delivery: str | None = getattr(schedule, DELIVERY)
    latest = (
        None
        if delivery is None
        else {
            "status": delivery,
            "last_error": getattr(schedule, DELIVERY_ERROR),
            **{name: getattr(schedule, f"dsched_{name}") for name in _PHASES},
        }
    )
    verdict = judge.verdict(schedule)
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
        health=verdict.state,
        health_since=verdict.since,
        health_reason=verdict.reason,
        health_error=verdict.error,
        last_success=getattr(schedule, judge.LAST_SUCCESS),
        overlap_policy=schedule.overlap_policy,
        pause_on_failure=schedule.pause_on_failure,
        skip_count=schedule.skip_count,
        buffer_count=schedule.buffer_count,
        held_for=schedule.held_by,
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
