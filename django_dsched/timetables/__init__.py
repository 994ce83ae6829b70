"""When schedules fire: interval grids, cron and recurrence rules in a time zone, one-shots,
business calendars that filter them, and the misfire,
bounds and jitter rules that pick the slot a due schedule fires.

Pure Python, no database: every path that computes fire times (the fire path, the admin's
preview, the API, edits, resumes, backfills) goes through these names.
"""

from __future__ import annotations

from django_dsched.exceptions import NoMoreSlots
from django_dsched.timetables.calendars import Blackout, Calendar, WeeklyWindow
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.filtered import Fate, Filtered, Shift, fates
from django_dsched.timetables.grid import Grid
from django_dsched.timetables.jitter import jitter
from django_dsched.timetables.misfire import Decision, Rules, backlog_window, decide, first_slot
from django_dsched.timetables.rrule import RRuleTimetable, check_recurrence, validate_recurrence
from django_dsched.timetables.timetable import IntervalTimetable, Once, Timetable, timetable_for

__all__ = [
    "Blackout",
    "Calendar",
    "CronTimetable",
    "Decision",
    "Fate",
    "Filtered",
    "Grid",
    "IntervalTimetable",
    "NoMoreSlots",
    "Once",
    "RRuleTimetable",
    "Rules",
    "Shift",
    "Timetable",
    "WeeklyWindow",
    "backlog_window",
    "check_recurrence",
    "decide",
    "fates",
    "first_slot",
    "jitter",
    "timetable_for",
    "validate_recurrence",
]
