"""When schedules fire: interval grids, cron in a time zone, one-shots, and the misfire,
bounds and jitter rules that pick the slot a due schedule fires.

Pure Python, no database: every path that computes fire times (the fire path, the admin's
preview, the API, edits, resumes, backfills) goes through these names.
"""

from __future__ import annotations

from django_dsched.exceptions import NoMoreSlots
from django_dsched.timetables.cron import CronTimetable
from django_dsched.timetables.grid import Grid
from django_dsched.timetables.jitter import jitter
from django_dsched.timetables.misfire import Decision, Rules, backlog_window, decide, first_slot
from django_dsched.timetables.timetable import IntervalTimetable, Once, Timetable, timetable_for

__all__ = [
    "CronTimetable",
    "Decision",
    "Grid",
    "IntervalTimetable",
    "NoMoreSlots",
    "Once",
    "Rules",
    "Timetable",
    "backlog_window",
    "decide",
    "first_slot",
    "jitter",
    "timetable_for",
]
