"""The order people read schedules in: the admin's schedule list, ``dsched list`` and
``api.schedules``."""

from __future__ import annotations

from django.db.models import Case, F, OrderBy, Value, When

from django_dsched.enums import PLANNED


def next_fire_order() -> list[OrderBy]:
    """Schedules that will fire first, soonest first; then those that ended (completed,
    cancelled, set aside), most recently fired first: a completed one-shot's old next run
    no longer sorts it to the top."""
    return [
        Case(When(state__in=PLANNED, then=Value(0)), default=Value(1)).asc(),
        Case(When(state__in=PLANNED, then=F("next_run_ts"))).asc(),
        F("last_fired_ts").desc(nulls_last=True),
    ]


__all__ = ["next_fire_order"]
