"""Which slot of a due schedule fires: its misfire policy and its bounds.

Every caller that needs a schedule's fire times (the fire path, previews, dry runs, edits,
resumes, backfills) goes through :func:`timetable_for` and :func:`decide`, so what the
admin previews is what fires.

Misfire rules (``now`` is the database's clock; the missed slots are those from the
schedule's next slot up to ``now``; a slot is *missed* when later than the grace):

* ``COALESCE`` (default): fire once, for the latest slot, unless it is itself missed.
  No grace by default.
* ``CATCH_UP``: fire every slot, oldest first (one per poll round), but at most
  ``catch_up_limit`` of them (the latest); missed ones are skipped. No grace by default.
* ``SKIP``: like ``COALESCE`` but with a grace of ``DSCHED_MISFIRE_GRACE_SECONDS``
  (60 s) when none is set: after an outage it goes on from the next future slot.

Bounds: no slot after ``end_ts`` fires, and the fire that reaches ``max_fires`` (or the
last slot of a one-shot) completes the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_dsched.conf import app_settings
from django_dsched.enums import MisfirePolicy
from django_dsched.timetables.timetable import Timetable


@dataclass(frozen=True, slots=True)
class Rules:
    """A schedule's misfire policy and bounds."""

    policy: str = MisfirePolicy.COALESCE
    grace_seconds: int | None = None
    catch_up_limit: int = 100
    start: datetime | None = None
    end: datetime | None = None
    max_fires: int | None = None

    def grace(self) -> timedelta | None:
        if self.grace_seconds is not None:
            return timedelta(seconds=self.grace_seconds)
        if self.policy == MisfirePolicy.SKIP:
            return timedelta(seconds=app_settings.MISFIRE_GRACE_SECONDS)
        return None


@dataclass(frozen=True, slots=True)
class Decision:
    slot: datetime | None  # the slot to fire now, or None to fire nothing
    next_slot: datetime | None  # the following slot, or None: the schedule completes
    missed: bool  # slots were skipped or coalesced


def first_slot(table: Timetable, rules: Rules, not_before: datetime) -> datetime | None:
    """The schedule's first slot at or after ``not_before`` (and its start), within bounds."""
    if rules.start is not None and rules.start > not_before:
        not_before = rules.start
    slot = table.slot_at_or_after(not_before)
    if slot is not None and rules.end is not None and slot > rules.end:
        return None
    return slot


def decide(
    table: Timetable, rules: Rules, next_slot: datetime, now: datetime, fire_count: int
) -> Decision:
    """What to fire for a schedule due at ``next_slot`` (``<= now``), and what comes next."""
    grace = rules.grace()
    oldest_allowed = None if grace is None else now - grace
    latest = table.slot_at_or_before(now)
    if latest is None or latest < next_slot:
        latest = next_slot
    several = latest > next_slot
    fire: datetime | None
    after: datetime | None

    if rules.policy == MisfirePolicy.CATCH_UP:
        slot = _catch_up_slot(table, next_slot, latest, rules.catch_up_limit)
        missed = slot > next_slot
        if oldest_allowed is not None and slot < oldest_allowed:
            slot = table.slot_at_or_after(oldest_allowed) or latest
            missed = True
        fire = slot
        if slot > now:  # nothing within the grace: wait for that slot
            fire, after = None, slot
        else:
            after = table.slot_after(slot)
    else:
        fire = latest
        missed = several
        if oldest_allowed is not None and latest < oldest_allowed:
            fire, missed = None, True
        after = table.slot_after(latest)

    if fire is not None and rules.end is not None and fire > rules.end:
        fire, after = None, None
    if after is not None and rules.end is not None and after > rules.end:
        after = None
    if rules.max_fires is not None and fire_count + (fire is not None) >= rules.max_fires:
        after = None
    return Decision(fire, after, missed)


def _catch_up_slot(table: Timetable, oldest: datetime, latest: datetime, limit: int) -> datetime:
    """The oldest slot to fire in a catch-up of at most ``limit`` slots ending at ``latest``.

    Found on the grid (``Timetable.rewind``), not by walking the backlog: a catch-up fires
    one slot per round, so a walk here would cost O(limit) on every fire.
    """
    return table.rewind(latest, limit - 1, oldest)
