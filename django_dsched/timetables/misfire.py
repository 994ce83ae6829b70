"""Which slot of a due schedule fires: its misfire policy and its bounds.

Every caller that needs a schedule's fire times (the fire path, previews, dry runs, edits,
resumes, backfills) goes through :func:`timetable_for` and :func:`decide`, so what the
admin previews is what fires.

Misfire rules (``now`` is the database's clock; the missed slots are those from the
schedule's next slot up to ``now``; a slot is *missed* when its run time, the slot plus its
jitter, is earlier than ``now`` minus the grace):

* ``COALESCE`` (default): the *backlog*, the slots whose run time is at least one
  :func:`backlog_window` old (``DSCHED_POLL_INTERVAL``, at least a second), fires once, for
  its latest slot, unless that slot is itself missed. A slot that came due within the
  window is not backlog: it fires in a round of its own, oldest first, as ``CATCH_UP``
  does, so a poll's lag never coalesces two neighbouring fires (jitter can put their run
  times milliseconds apart). No grace by default.
* ``CATCH_UP``: fire every slot, oldest first (one per poll round), but at most
  ``catch_up_limit`` of them (the latest); missed ones are skipped. No grace by default.
* ``SKIP``: like ``COALESCE`` but with a grace of ``DSCHED_MISFIRE_GRACE_SECONDS``
  (60 s) when none is set: after an outage longer than the grace the backlog is skipped,
  and it goes on from the slots that came due within the window (usually none: from the
  next future slot).

With a grace shorter than the window, the window is the grace (a slot older than the grace
is missed either way). After an outage a ``COALESCE`` schedule therefore fires once for the
backlog, then each slot that came due within the window: at most ``ceil(window / period)``
of them without jitter (one when the period is longer than the window), one more with
jitter (``period``: the shortest gap between its slots).

Lateness is measured from the run time, not the slot: a jitter larger than the grace
delays fires, it never makes them count as missed. A slot is due when its run time has
come; a slot's jitter is shorter than the gap to the next slot (:func:`.jitter.jitter`),
so run times keep the slots' order.

Bounds: no slot after ``end_ts`` fires, and the fire that reaches ``max_fires`` (or the
last slot of a one-shot) completes the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_dsched.conf import app_settings
from django_dsched.enums import MisfirePolicy
from django_dsched.timetables.jitter import jitter
from django_dsched.timetables.timetable import Timetable

MICROSECOND = timedelta(microseconds=1)
# The shortest backlog window, whatever DSCHED_POLL_INTERVAL: a busy leader's poll can lag
# by a few hundred milliseconds.
MIN_BACKLOG_WINDOW = timedelta(seconds=1)


def backlog_window() -> timedelta:
    """How long a slot's run time must have passed before ``COALESCE`` and ``SKIP`` treat it
    as backlog: ``DSCHED_POLL_INTERVAL``, at least :data:`MIN_BACKLOG_WINDOW`.

    A slot due for less than this is one a poll found a little late, not one an outage
    left behind: it fires in a round of its own. Read from the setting (not from a
    scheduler's ``--poll-interval``), so every instance decides alike.
    """
    return max(timedelta(seconds=app_settings.POLL_INTERVAL), MIN_BACKLOG_WINDOW)


@dataclass(frozen=True, slots=True)
class Rules:
    """A schedule's misfire policy, bounds and jitter."""

    policy: str = MisfirePolicy.COALESCE
    grace_seconds: int | None = None
    catch_up_limit: int = 100
    start: datetime | None = None
    end: datetime | None = None
    max_fires: int | None = None
    jitter_seconds: int = 0
    jitter_key: object = None  # the schedule id: each schedule has its own spread

    def grace(self) -> timedelta | None:
        if self.grace_seconds is not None:
            return timedelta(seconds=self.grace_seconds)
        if self.policy == MisfirePolicy.SKIP:
            return timedelta(seconds=app_settings.MISFIRE_GRACE_SECONDS)
        return None

    def run_time(self, table: Timetable, slot: datetime) -> datetime:
        """When ``slot`` fires: the slot plus its jitter (shorter than the gap to the next
        slot)."""
        if self.jitter_seconds <= 0:
            return slot
        following = table.slot_after(slot)
        return slot + jitter(self.jitter_key, slot, self.jitter_seconds, following)


@dataclass(frozen=True, slots=True)
class Decision:
    slot: datetime | None  # the slot to fire now, or None to fire nothing
    next_slot: datetime | None  # the following slot, or None: the schedule completes
    missed: bool  # slots were skipped or coalesced


def first_slot(table: Timetable, rules: Rules, not_before: datetime) -> datetime | None:
    """The schedule's first slot that runs at or after ``not_before`` (and is not before
    its start), within bounds.

    A slot just before ``not_before`` whose jittered run time is still ahead counts: it has
    not fired yet.
    """
    slot = None
    if rules.jitter_seconds > 0:
        earlier = table.slot_at_or_before(not_before)
        if (
            earlier is not None
            and (rules.start is None or earlier >= rules.start)
            and rules.run_time(table, earlier) >= not_before
        ):
            slot = earlier
    if slot is None:
        if rules.start is not None and rules.start > not_before:
            not_before = rules.start
        slot = table.slot_at_or_after(not_before)
    if slot is not None and rules.end is not None and slot > rules.end:
        return None
    return slot


def _none_due_after(
    table: Timetable, rules: Rules, next_slot: datetime, now: datetime
) -> tuple[datetime | None] | None:
    """The usual case, in one search: no slot after ``next_slot`` is due by ``now`` (run
    times keep the slots' order, so the next one says it). Then ``(the slot after it,)``,
    which the decision needs anyway; else None."""
    following = table.slot_after(next_slot)
    if following is not None and rules.run_time(table, following) > now:
        return (following,)
    return None  # a backlog, or no slot found after it (a search may give up: look back)


def _latest_due(table: Timetable, rules: Rules, next_slot: datetime, now: datetime) -> datetime:
    """The latest slot from ``next_slot`` on whose run time is at or before ``now``
    (``next_slot`` itself when no later one's is)."""
    latest = table.slot_at_or_before(now)
    if latest is None or latest <= next_slot:
        return next_slot
    if rules.run_time(table, latest) > now:
        # Its jitter is still ahead; run times keep the slots' order, so the one before it
        # is due.
        earlier = table.slot_at_or_before(latest - MICROSECOND)
        latest = earlier if earlier is not None and earlier > next_slot else next_slot
    return latest


def _first_running_at_or_after(
    table: Timetable, rules: Rules, when: datetime, latest: datetime
) -> datetime:
    """The first slot whose run time is at or after ``when`` (``latest`` if none is known)."""
    slot = table.slot_at_or_before(when)
    if slot is None or rules.run_time(table, slot) < when:
        slot = table.slot_at_or_after(when)
    return latest if slot is None else slot


def decide(
    table: Timetable,
    rules: Rules,
    next_slot: datetime,
    now: datetime,
    fire_count: int,
    window: timedelta | None = None,
) -> Decision:
    """What to fire for a schedule due at ``next_slot`` (its run time ``<= now``), and what
    comes next. ``window``: the backlog window (default :func:`backlog_window`; the fire
    path reads it once per batch)."""
    grace = rules.grace()
    fire: datetime | None
    after: datetime | None

    if rules.policy == MisfirePolicy.CATCH_UP:
        oldest_allowed = None if grace is None else now - grace
        usual = _none_due_after(table, rules, next_slot, now)
        latest = next_slot if usual is not None else _latest_due(table, rules, next_slot, now)
        slot = _catch_up_slot(table, next_slot, latest, rules.catch_up_limit)
        missed = slot > next_slot
        if oldest_allowed is not None and rules.run_time(table, slot) < oldest_allowed:
            slot = max(_first_running_at_or_after(table, rules, oldest_allowed, latest), slot)
            missed = True
        fire = slot
        if slot > latest:  # nothing within the grace is due: wait for that slot
            fire, after = None, slot
        elif usual is not None and slot == next_slot:
            after = usual[0]
        else:
            after = table.slot_after(slot)
    else:
        fire, after, missed = _coalesce(table, rules, next_slot, now, grace, window)

    if fire is not None and rules.end is not None and fire > rules.end:
        fire, after = None, None
    if after is not None and rules.end is not None and after > rules.end:
        after = None
    if rules.max_fires is not None and fire_count + (fire is not None) >= rules.max_fires:
        after = None
    return Decision(fire, after, missed)


def _coalesce(
    table: Timetable,
    rules: Rules,
    next_slot: datetime,
    now: datetime,
    grace: timedelta | None,
    window: timedelta | None,
) -> tuple[datetime | None, datetime | None, bool]:
    """``COALESCE`` and ``SKIP``: (slot to fire, following slot, missed).

    The backlog is the slots whose run time is at least ``window`` old; it coalesces into
    its latest slot. When ``next_slot`` came due within the window there is no backlog and
    ``next_slot`` fires: later slots due by now fire in the rounds after, oldest first.
    """
    if window is None:
        window = backlog_window()
    if grace is not None and grace < window:
        window = grace  # older than the grace is missed anyway: backlog
    usual = _none_due_after(table, rules, next_slot, now - window)
    if usual is not None:
        slot, after = next_slot, usual[0]
    else:
        slot = _latest_due(table, rules, next_slot, now - window)
        after = table.slot_after(slot)
    if grace is None or rules.run_time(table, slot) >= now - grace:
        return slot, after, slot > next_slot
    # The backlog is older than the grace: skipped. The slot after it came due within the
    # window (so within the grace) or is still ahead; fire it now if it is due.
    if after is None or rules.run_time(table, after) > now:
        return None, after, True
    return after, table.slot_after(after), True


def _catch_up_slot(table: Timetable, oldest: datetime, latest: datetime, limit: int) -> datetime:
    """The oldest slot to fire in a catch-up of at most ``limit`` slots ending at ``latest``.

    Found on the grid (``Timetable.rewind``), not by walking the backlog: a catch-up fires
    one slot per round, so a walk here would cost O(limit) on every fire.
    """
    return table.rewind(latest, limit - 1, oldest)
