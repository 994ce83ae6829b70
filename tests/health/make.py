"""Schedules in a given health, for the tests of every door."""

from __future__ import annotations

from datetime import timedelta

from django_dsched import api
from django_dsched.models import Schedule
from tests.helpers import sql


def db_now():
    return sql("SELECT clock_timestamp()")[0][0]


def late_and_new(prefix: str = "") -> tuple[Schedule, Schedule]:
    """An hourly schedule whose first run was due five minutes ago (LATE, key
    ``<prefix>late-key``) and one whose first run is in an hour (NEW)."""
    now = db_now()
    late = api.create_interval(
        f"{prefix}late",
        every=1,
        unit="HOURS",
        start=now - timedelta(minutes=5),
        topic="t",
        event_type="x",
        key=f"{prefix}late-key",
    )
    new = api.create_interval(
        f"{prefix}new",
        every=1,
        unit="HOURS",
        start=now + timedelta(hours=1),
        topic="t",
        event_type="x",
    )
    return late, new
