"""Planning a schedule that business calendars filter (``Schedule.calendar_ids``): the
calendars a batch needs, read once per batch; the slot it goes on from after a calendar
edit; and what the calendars did to its slots, recorded (audit) and counted (metrics).

A calendar is read, not copied into each schedule: an edit reaches every schedule using it
at its next plan, with no write to any schedule. The stored next slot was placed with the
calendars of that time, so a calendared row is planned from the first slot of its current
timetable after its last fire or change (:func:`go_on_from`):

* the stored slot is still that slot: nothing changed;
* a later one (the stored slot was dropped or moved later): the stored slot does not fire,
  and is recorded as excluded; the schedule waits for the new slot (or fires it, if due);
* an earlier one (a day off added before a ``BACKWARD`` slot, a holiday removed): it is
  due, late, and the misfire policy decides (``COALESCE`` fires it).

A plain schedule (``calendar_ids`` NULL) takes none of this: no query, no search.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_dsched.exceptions import CalendarError
from django_dsched.models.calendar import calendars_by_id
from django_dsched.timetables import Timetable
from django_dsched.timetables.calendars import Calendar
from django_dsched.timetables.filtered import (
    MAX_SHIFT_DAYS,
    Fate,
    fates_to_record,
    with_calendars,
)

MICROSECOND = timedelta(microseconds=1)
# How far before its planned next slot a row looks for a slot a calendar edit put there: a
# shift moves a slot at most MAX_SHIFT_DAYS; a slot an edit brings back further in the past
# is not fired (the misfire policies would coalesce or skip it anyway).
LOOK_BACK = timedelta(days=MAX_SHIFT_DAYS + 1)
# The most dropped slots one plan of a row looks for and its audit event lists; past them
# the event says "more": true, and the counts count those listed (a bound on a row's cost).
LISTED = 50
STALE = "no longer a slot of the schedule: its calendars changed since it was planned"
# The most filtered timetables a batch keeps (past it, it starts again).
MAX_SHARED = 1024
# The audit event's type (a change event: no slot, no outbox message).
EVENT_TYPE = "dsched.schedule.slots_filtered"


def batch_calendars(ids: Sequence[Sequence[str] | None]) -> dict[str, Calendar]:
    """The calendars the claimed rows name (their ``calendar_ids``), by id: one query for
    their versions, one more for those changed since this process built them. None named:
    nothing is read."""
    wanted = {calendar_id for row_ids in ids if row_ids for calendar_id in row_ids}
    return calendars_by_id(wanted) if wanted else {}


def filtered(
    table: Timetable,
    ids: Sequence[str],
    policy: str,
    time_zone: str,
    calendars: Mapping[str, Calendar],
) -> Timetable:
    """``table`` filtered by the calendars ``ids``; :class:`CalendarError` (the row is set
    aside) when one no longer exists."""
    missing = [calendar_id for calendar_id in ids if calendar_id not in calendars]
    if missing:
        raise CalendarError(f"calendar {missing[0]} does not exist (it was deleted)")
    return with_calendars(table, [calendars[c] for c in ids], policy, time_zone)


class Shared:
    """A batch's calendar-filtered timetables, one per timetable, calendars and policy:
    the rows that share one (per-minute crons due at the same minute, say) share what its
    searches found (:class:`.Filtered` remembers its answers), so each question is asked
    once per batch, not once per row. Calendars are read as the batch read them, once per
    version, so nothing here outlives the batch's view of them."""

    def __init__(self, calendars: Mapping[str, Calendar]) -> None:
        self.calendars = calendars
        self._tables: dict[tuple[Any, ...], Timetable] = {}

    def filtered(
        self, key: tuple[Any, ...], table: Timetable, ids: Sequence[str], policy: str, zone: str
    ) -> Timetable:
        """:func:`filtered`, built once per ``key`` (what the timetable ``table`` is made
        of, without the row's own columns)."""
        key = (*key, tuple(ids), policy)
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= MAX_SHARED:
                self._tables.clear()
            found = self._tables[key] = filtered(table, ids, policy, zone, self.calendars)
        return found


def refuse_frozen(
    table: Timetable, inner: Timetable, after: datetime, end: datetime | None
) -> None:
    """Raise :class:`CalendarError` (the row is set aside, with this error) when ``table``,
    ``inner`` filtered by calendars, has no slot after ``after`` but ``inner`` has one (not
    after ``end``) beyond what a shift could have moved onto ``after`` (:data:`LOOK_BACK`):
    the calendars drop every slot as far as the planner looks (a blackout over the whole
    week, say). Such a row is not completed, which no calendar edit could undo; once its
    calendars let a slot through, it is resumed."""
    following = inner.slot_after(after + LOOK_BACK)
    if following is None or (end is not None and following > end):
        return
    raise CalendarError(
        f"its calendars drop every slot from {following.isoformat()} on, as far as the "
        "scheduler looks (blackout windows or days off that cover every slot): edit the "
        "calendars, then resume the schedule"
    )


def go_on_from(
    table: Timetable, start: datetime, stored: datetime, last_change: datetime | None
) -> tuple[datetime | None, bool]:
    """The slot to plan from (None: no slot is left) and whether ``stored`` (the row's next
    slot) is no longer a slot of ``table``. The first slot after the schedule's last fire
    or change (``last_change``), not before its ``start`` nor :data:`LOOK_BACK` before
    ``stored``."""
    low = stored - MICROSECOND
    if last_change is not None and last_change < stored:
        low = max(last_change, start - MICROSECOND, stored - LOOK_BACK)
    current = table.slot_after(low)
    if current == stored:
        return stored, False
    still = current is not None and current < stored and table.slot_at_or_after(stored) == stored
    return current, not still


@dataclass(slots=True)
class Fates:
    """What the calendars did to the slots of a batch's rows: each row's audit payload and
    the counts by fate."""

    ids: list[str] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def note(
        self,
        schedule_id: str,
        table: Timetable,
        start: datetime,
        next_slot: datetime | None,
        fired: datetime | None,
        stale: datetime | None,
    ) -> None:
        """Record what a plan of ``schedule_id`` that moved it on from ``start`` to
        ``next_slot``, firing ``fired``, passed by (``stale``: its stored slot, which no
        longer is one)."""
        found = fates_to_record(table, start, next_slot, fired, limit=LISTED + 1)
        # Past LISTED dropped slots the rest are not searched for (a bound on the row's
        # cost): the audit says there were more, and the counts count those found.
        more = sum(fate.fires_at is None for fate in found) > LISTED
        if more:
            found = found[:-1]
        if stale is not None and all(fate.slot != stale for fate in found):
            found.insert(0, Fate(stale, None, "", STALE))
        if not found:
            return
        counts: dict[str, Any] = {}
        for fate in found:
            counts[fate.kind] = counts.get(fate.kind, 0) + 1
            self.counts[fate.kind] = self.counts.get(fate.kind, 0) + 1
        if more:
            counts["more"] = True
        self.ids.append(schedule_id)
        self.payloads.append(json.dumps({"slots": [_entry(f) for f in found[:LISTED]], **counts}))

    def without(self, refused: set[str]) -> tuple[list[str], list[str]]:
        """The ids and payloads of the rows that were written (not ``refused``)."""
        kept = [(i, p) for i, p in zip(self.ids, self.payloads, strict=True) if i not in refused]
        return [i for i, _p in kept], [p for _i, p in kept]


def _entry(fate: Fate) -> dict[str, Any]:
    return {
        "slot": fate.slot.isoformat(),
        "fate": fate.kind,
        "fires_at": None if fate.fires_at is None else fate.fires_at.isoformat(),
        "calendar": fate.calendar,
        "reason": fate.reason,
    }


__all__ = ["EVENT_TYPE", "Fates", "batch_calendars", "filtered", "go_on_from", "refuse_frozen"]
