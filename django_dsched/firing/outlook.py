"""What the overlap policies will do to a schedule's next fires, as far as can be told now
(docs/overlap.md): the admin's preview notes each time it shows.

A slot held for a run, and the slots that came due while it waits, are decided already (the
policy's release rule, firing/overlap.py, and the catch-up window); a slot still ahead meets
the previous run only if that run is still going then, which no one knows: it is noted as a
condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _

from django_dsched.conf import app_settings
from django_dsched.enums import OverlapPolicy, ScheduleState
from django_dsched.models import Schedule
from django_dsched.models.overlap import FREE, PREVIOUS_RUN, QUEUED


@dataclass(frozen=True, slots=True)
class Run:
    """A schedule's previous run: its message id and state (models/overlap.run_state)."""

    id: str
    state: str

    @property
    def going(self) -> bool:
        return self.state != FREE


def previous_run(cursor: Any, schedule_id: Any) -> Run | None:
    """The schedule's newest message and whether it goes (database clock); None: none."""
    cursor.execute(
        PREVIOUS_RUN, {"id": schedule_id, "worker_timeout": app_settings.OVERLAP_WORKER_TIMEOUT}
    )
    row = cursor.fetchone()
    return None if row is None else Run(str(row[0]), row[1])


def preview_notes(
    schedule: Schedule, runs: list[datetime], run: Run | None, now: datetime
) -> list[str]:
    """A note for each of ``runs`` (the schedule's next fire times, :meth:`Schedule.preview`)
    saying what its overlap policy does to it, "" where nothing is known; ``run``: the
    previous run (:func:`previous_run`), ``now``: the database's."""
    notes = [""] * len(runs)
    policy = schedule.overlap_policy
    if policy == OverlapPolicy.ALLOW_ALL or schedule.state != ScheduleState.ACTIVE:
        return notes
    grace = schedule.rules().grace()
    due = [i for i, when in enumerate(runs) if when <= now]
    if schedule.held_by is not None:
        held = str(schedule.held_by)[:8]
        for i in due:
            notes[i] = _held(policy, i, due, held, int(app_settings.OVERLAP_BUFFER_LIMIT))
            if grace is not None and runs[i] < now - grace:
                notes[i] = _("skipped: later than the catch-up window")
        return notes
    if run is None or not run.going:
        return notes
    ahead = next((i for i, when in enumerate(runs) if when > now), None)
    for i in [*due, *([] if ahead is None else [ahead])]:
        notes[i] = _meets(policy, run, runs[i] <= now)
    return notes


def _held(policy: str, i: int, due: list[int], run: str, limit: int) -> str:
    """The note of the due slot at ``i`` of a schedule whose next slot is held for ``run``."""
    if policy == OverlapPolicy.CANCEL_OTHER:
        if i == due[-1]:
            return _("fires when run %(run)s ends (the newest slot due)") % {"run": run}
        return _("skipped: a newer slot is due")
    if policy == OverlapPolicy.BUFFER_ALL:
        if len(due) - due.index(i) > limit:
            return _("skipped: more than %(limit)d slots wait") % {"limit": limit}
        if i == due[0]:
            return _("held until run %(run)s ends") % {"run": run}
        return _("held: fires after the slot before it")
    if i == due[0]:
        return _("held until run %(run)s ends") % {"run": run}
    return _("skipped: a slot is already held")


def _meets(policy: str, run: Run, due: bool) -> str:
    """The note of a slot that meets the previous run ``run`` if it still goes then
    (``due``: it is due now, and it does)."""
    short = run.id[:8]
    if policy == OverlapPolicy.SKIP:
        if due:
            return _("skipped: run %(run)s is still going") % {"run": short}
        return _("skipped if run %(run)s is still going then") % {"run": short}
    if policy == OverlapPolicy.CANCEL_OTHER and run.state == QUEUED:
        return _("fires, cancelling run %(run)s if it has not started by then") % {"run": short}
    if due:
        return _("held until run %(run)s ends") % {"run": short}
    return _("held if run %(run)s is still going then") % {"run": short}
