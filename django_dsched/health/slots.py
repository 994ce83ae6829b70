"""A schedule's recent slots, scheduled against actual: what its timeline shows.

The expected slots come from its timetable (the scheduler's own code), from its creation
(or its start, when later) to now; the actual fires from its events (one per fired slot);
each fire's run from its outbox message; the periods it was paused or set aside from its
audit events. Each slot is one of :class:`Outcome`:

- ``ON_TIME`` / ``LATE``: fired, within its grace of its run time or later;
- ``FAILED``: fired, and its delivery or run failed (retrying, failed, dead letter);
- ``MISSED``: not fired although it was due more than its grace ago and the schedule was
  meant to fire (an outage coalesced or skipped it, or the scheduler set it aside);
- ``SKIPPED``: not fired while the schedule was paused, or dropped by its overlap policy
  (``dsched.schedule.skipped``: SKIP, or the slots a buffer's release passed over);
- ``DUE``: due within its grace, and the scheduler has not come to it yet; or held for a
  run by its overlap policy (it fires when the run ends).

Slots its calendars exclude are not slots of its timetable: not shown.

Bounded reads: the newest ``count`` fires (an index per day), the messages from the oldest
of them on (by the schedule's version index), and at most :data:`CHANGES_READ` changes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_dsched.conf import app_settings
from django_dsched.enums import RunStatus, ScheduleState
from django_dsched.firing.overlap import SKIPPED as SKIPPED_VERB
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.outbox import phases
from django_dsched.timetables import backlog_window

MICROSECOND = timedelta(microseconds=1)
# Most state changes of a schedule read to find its paused periods in the window.
CHANGES_READ = 500
# Runs that count as a failed slot.
FAILED_RUNS = (RunStatus.RETRYING, RunStatus.FAILED, RunStatus.DEAD)


class Outcome(models.TextChoices):
    ON_TIME = "ON_TIME", _("on time")
    LATE = "LATE", _("late")
    FAILED = "FAILED", _("delivery failed")
    MISSED = "MISSED", _("missed")
    SKIPPED = "SKIPPED", _("skipped (paused, or by its overlap policy)")
    DUE = "DUE", _("due")


@dataclass(frozen=True, slots=True)
class Slot:
    slot: datetime  # the slot, UTC
    due: datetime | None  # when it was to run (slot + jitter); None: not in the timetable
    fired: datetime | None  # when its event was written (database clock)
    outcome: str  # an Outcome
    run: str | None = None  # its message's RunStatus
    message_id: uuid.UUID | None = None

    @property
    def lag(self) -> float | None:
        """Seconds from its run time to its fire (None: not fired)."""
        if self.fired is None:
            return None
        return max(0.0, (self.fired - (self.due or self.slot)).total_seconds())


def _expected(schedule: Schedule, now: datetime, count: int) -> list[tuple[datetime, datetime]]:
    """(slot, run time) of the newest ``count`` slots the schedule was meant to fire up to
    ``now``, oldest first. Empty if its timing cannot be planned."""
    upper = now
    if schedule.end_ts is not None:
        upper = min(upper, schedule.end_ts)
    if schedule.state == ScheduleState.CANCELLED:
        upper = min(upper, schedule.updated_ts)
    if schedule.state == ScheduleState.COMPLETED and schedule.last_fired_ts is not None:
        upper = min(upper, schedule.last_fired_ts)
    floor = max(schedule.start_ts, schedule.created_ts - backlog_window())
    if schedule.state in (ScheduleState.ACTIVE, ScheduleState.PAUSED):
        floor = min(floor, schedule.next_slot_ts)  # made with a start in the past: still due
    found: list[tuple[datetime, datetime]] = []
    try:
        table, rules = schedule.timetable(), schedule.rules()
        slot = table.slot_at_or_before(upper)
        while slot is not None and slot >= floor and len(found) < count:
            due = rules.run_time(table, slot)
            if due <= now:
                found.append((slot, due))
            slot = table.slot_at_or_before(slot - MICROSECOND)
    except Exception:  # a timing the scheduler cannot plan (it sets such a schedule aside)
        return []
    return found[::-1]


def _changes(schedule: Schedule, since: datetime) -> list[tuple[datetime, str, Any]]:
    """(time, type, payload) of the schedule's change events since ``since`` (at most
    :data:`CHANGES_READ`), oldest first."""
    return list(
        Event.objects.filter(
            aggregate_id=schedule.pk, scheduled_ts__isnull=True, event_ts__gte=since
        )
        .order_by("aggregate_version")
        .values_list("event_ts", "event_type", "payload")[:CHANGES_READ]
    )


def _overlap_skips(changes: list[tuple[datetime, str, Any]]) -> list[tuple[datetime, datetime]]:
    """[from, to) of the slots the overlap policy dropped: each ``dsched.schedule.skipped``
    event names the first slot it dropped and the slot the schedule went on from."""
    skips = []
    for _at, kind, payload in changes:
        if kind != f"dsched.schedule.{SKIPPED_VERB}" or not isinstance(payload, dict):
            continue
        try:
            first = datetime.fromisoformat(payload["slot"])
            after = datetime.fromisoformat(payload["next"])
        except (KeyError, TypeError, ValueError):
            continue
        skips.append((first, max(after, first + MICROSECOND)))
    return skips


def _inactive(
    schedule: Schedule, since: datetime, changes: list[tuple[datetime, str, Any]]
) -> list[tuple[datetime, datetime, str]]:
    """(from, to, state) of the periods since ``since`` the schedule was not active."""
    periods: list[tuple[datetime, datetime, str]] = []
    start: datetime | None = None
    state: str | None = None
    first = True
    for at, _kind, payload in changes:
        pair = payload.get("changes", {}).get("state") if isinstance(payload, dict) else None
        if not isinstance(pair, list) or len(pair) != 2:
            continue
        before, after = pair
        if first and before != ScheduleState.ACTIVE:
            start, state = since, before
        first = False
        if after != ScheduleState.ACTIVE and start is None:
            start, state = at, after
        elif after == ScheduleState.ACTIVE and start is not None:
            periods.append((start, at, state or ScheduleState.PAUSED))
            start = None
    if first and schedule.state in (ScheduleState.PAUSED, ScheduleState.SET_ASIDE):
        start, state = since, schedule.state  # no change since: it was so throughout
    if start is not None:
        periods.append((start, datetime.max.replace(tzinfo=since.tzinfo), state or ""))
    return periods


def _messages(schedule: Schedule, versions: list[int]) -> dict[uuid.UUID, OutboxMessage]:
    if not versions:
        return {}
    rows = OutboxMessage.objects.filter(
        aggregate_id=schedule.pk, aggregate_version__gte=min(versions)
    ).only("id", "status", "picked_ts", "started_ts", "completed_ts", "failed_ts")
    return {row.pk: row for row in rows}


def recent_slots(schedule: Schedule, now: datetime, count: int = 60) -> list[Slot]:
    """The newest ``count`` slots of ``schedule`` up to ``now`` (database clock), oldest
    first: the ones its timetable gave and the ones it fired (a backfill's, a run now's)."""
    grace = timedelta(
        seconds=app_settings.HEALTH_GRACE_SECONDS
        if schedule.health_grace_seconds is None
        else schedule.health_grace_seconds
    )
    fires: list[Any] = list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("-scheduled_ts")
        .values("id", "scheduled_ts", "event_ts", "aggregate_version")[:count]
    )
    fired = {f["scheduled_ts"]: f for f in fires}
    expected = dict(_expected(schedule, now, count))
    slots = sorted(set(expected) | set(fired))[-count:]
    if not slots:
        return []
    messages = _messages(schedule, [f["aggregate_version"] for f in fires])
    changes = _changes(schedule, slots[0])
    periods = _inactive(schedule, slots[0], changes)
    skips = _overlap_skips(changes)
    # A slot held for a run (docs/overlap.md) waits: it is due, however long ago.
    held = schedule.held_by is not None
    result = []
    for slot in slots:
        due = expected.get(slot)
        fire = fired.get(slot)
        if fire is not None:
            message = messages.get(fire["id"])
            run = phases.run_status(message) if message is not None else None
            lag = fire["event_ts"] - (due or slot)
            if run in FAILED_RUNS:
                outcome = Outcome.FAILED
            else:
                outcome = Outcome.LATE if lag > grace else Outcome.ON_TIME
            result.append(Slot(slot, due, fire["event_ts"], outcome, run and run.value, fire["id"]))
            continue
        when = due or slot
        state = next((s for start, end, s in periods if start <= when < end), None)
        if state == ScheduleState.PAUSED or any(a <= slot < b for a, b in skips):
            outcome = Outcome.SKIPPED  # paused, or dropped by its overlap policy
        elif slot >= schedule.next_slot_ts and (held or when + grace > now):
            outcome = Outcome.DUE  # not handled yet: not late yet, or held for a run
        else:
            outcome = Outcome.MISSED
        result.append(Slot(slot, due, None, outcome))
    return result
