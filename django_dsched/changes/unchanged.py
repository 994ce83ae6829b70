"""Why a state change or a backfill did nothing, in the words every door uses.

The Python API answers a pause, resume or cancel that changed nothing with ``False`` and a
backfill of a range without a slot with ``(0, 0)``; the doors that speak to a person (the
``dsched`` command, the admin, the REST API) say why with these sentences, naming the
schedule's state or its bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_dsched.enums import LIVE, PLANNED, ScheduleKind, ScheduleState
from django_dsched.models import Schedule

ACTIVE, PAUSED, SET_ASIDE = ScheduleState.ACTIVE, ScheduleState.PAUSED, ScheduleState.SET_ASIDE

# Each state change: the states it acts on, the state it leads to, and its participle.
CHANGES: dict[str, tuple[tuple[str, ...], str | None, Promise]] = {
    "pause": ((ACTIVE,), PAUSED, gettext_lazy("paused")),
    "resume": ((PAUSED, SET_ASIDE), ACTIVE, gettext_lazy("resumed")),
    "cancel": (LIVE, ScheduleState.CANCELLED, gettext_lazy("cancelled")),
    "run_now": (PLANNED, None, gettext_lazy("run now")),
}


def either(words: Sequence[str]) -> str:
    """ "a", "a or b", "a, b or c"."""
    if len(words) < 2:
        return "".join(words)
    return _("%(some)s or %(last)s") % {"some": ", ".join(words[:-1]), "last": words[-1]}


def rule(change: str) -> str:
    """ "Only active, paused or set aside schedules can be cancelled." """
    states, _target, done = CHANGES[change]
    return _("Only %(states)s schedules can be %(done)s.") % {
        "states": either([str(ScheduleState(state).label) for state in states]),
        "done": done,
    }


def state_of(schedule: Schedule) -> str:
    """ "nightly is completed (it fired its last slot)" """
    text = _("%(name)s is %(state)s") % {
        "name": schedule.schedule_name,
        "state": schedule.get_state_display(),
    }
    if schedule.state == ScheduleState.COMPLETED:
        text += " " + _("(it fired its last slot)")
    return text


def why_not(change: str, schedule: Schedule) -> str:
    """Why ``change`` (pause, resume, cancel, run_now) left ``schedule`` as it is, read
    after it: its state, and the states the change is for."""
    states, target, _done = CHANGES[change]
    name = schedule.schedule_name
    if schedule.state == target:
        return _("%(name)s is already %(state)s.") % {
            "name": name,
            "state": schedule.get_state_display(),
        }
    if schedule.state == SET_ASIDE and change == "resume":
        return _(
            "%(name)s is set aside and still cannot be planned: %(reason)s. Fix its "
            "definition first."
        ) % {"name": name, "reason": schedule.set_aside_reason}
    if schedule.state in states:  # it changed meanwhile, and back
        return _("%(name)s changed meanwhile; it is %(state)s now.") % {
            "name": name,
            "state": schedule.get_state_display(),
        }
    return f"{state_of(schedule)}. {rule(change)}"


def shown(moment: datetime) -> str:
    """A time in a sentence: ``2026-01-01 09:00:00 UTC``."""
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def no_slot(schedule: Schedule, start: datetime, end: datetime) -> str:
    """Why a backfill of ``[start, end]`` found no slot of ``schedule``: where its slots
    are instead (its start, its end, its one time, or its next slot after ``start``)."""
    text = _("No slot of this schedule falls between %(start)s and %(end)s") % {
        "start": shown(start),
        "end": shown(end),
    }
    once = schedule.schedule_kind == ScheduleKind.ONCE
    if once:
        why = _("it is a one-shot, at %(at)s") % {"at": shown(schedule.start_ts)}
    elif end < schedule.start_ts:
        why = _("it starts at %(start)s") % {"start": shown(schedule.start_ts)}
    elif schedule.end_ts is not None and start > schedule.end_ts:
        why = _("it ended at %(end)s") % {"end": shown(schedule.end_ts)}
    else:
        try:
            following = schedule.timetable().slot_at_or_after(max(start, schedule.start_ts))
        except Exception:  # a timetable that cannot be read: say no more than the range
            following = None
        if following is None:
            return text + "."
        why = _("its first slot after %(start)s is at %(next)s") % {
            "start": shown(start),
            "next": shown(following),
        }
    return f"{text}; {why}."


__all__ = ["CHANGES", "no_slot", "rule", "state_of", "why_not"]
