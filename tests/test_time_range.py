"""Times near the ends of the calendar are refused at every door with a clear error, never
an OverflowError from the timetables' arithmetic (jitter, a cron's search, a grid's step)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_dsched import api
from django_dsched.admin.schedule_form import ScheduleForm
from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule

pytestmark = pytest.mark.django_db

COMMON = {"topic": "ops", "event_type": "ping"}
EXTREMES = [
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-12))),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1, 1, 1, 12, tzinfo=timezone(timedelta(hours=12))),
    datetime(1899, 12, 31, 23, 59, tzinfo=UTC),
    datetime(9000, 1, 1, tzinfo=UTC),
]


@pytest.mark.parametrize("when", EXTREMES, ids=str)
@pytest.mark.parametrize(
    "create",
    [
        lambda when: api.create_interval("x", every=1, start=when, jitter_seconds=86_400, **COMMON),
        lambda when: api.create_cron("x", cron="* * * * *", start=when, **COMMON),
        lambda when: api.create_once("x", at=when, **COMMON),
    ],
    ids=["interval", "cron", "once"],
)
def test_the_python_api_refuses_times_out_of_range(create, when):
    with pytest.raises(ValidationError) as refused:
        create(when)
    assert "Give a time from 1900-01-01 to before 9000-01-01." in refused.value.messages
    assert not Schedule.objects.exists()


def test_the_range_holds_both_ends():
    assert api.create_once("first", at=datetime(1900, 1, 1, tzinfo=UTC), **COMMON)
    last = datetime(9000, 1, 1, tzinfo=UTC) - timedelta(microseconds=1)
    schedule = api.create_interval("last", every=1, start=last, jitter_seconds=86_400, **COMMON)
    assert schedule.next_run_ts > last


def test_the_admin_form_refuses_them_too():
    form = ScheduleForm(
        data={
            "schedule_name": "x",
            "host_id": "00000000-0000-0000-0000-000000000000",
            "schedule_kind": "ONCE",
            "time_zone": "UTC",
            "start_ts": "9999-12-31 23:00:00",
            "misfire_policy": "COALESCE",
            "catch_up_limit": 100,
            "jitter_seconds": 0,
            "priority": 0,
            "event_topic": "ops",
            "event_type": "ping",
            "event_data": "{}",
        }
    )
    assert not form.is_valid()
    assert "Give a time from 1900-01-01 to before 9000-01-01." in form.errors["start_ts"]


@pytest.mark.parametrize("until", [*EXTREMES[:2], datetime(9000, 1, 1, tzinfo=UTC)], ids=str)
def test_a_pause_until_the_end_of_time_is_refused_the_same_way(until):
    """Every time a row holds is one every reader can read (models/times.py): a pause's end
    too, at every door (the admin's pause form and REST go through the same call)."""
    api.create_interval("x", every=1, **COMMON)
    with pytest.raises(ValidationError) as refused:
        api.pause("x", until=until)
    assert "Give a time from 1900-01-01 to before 9000-01-01." in refused.value.messages
    assert Schedule.objects.get().state == "ACTIVE"


def test_a_naive_pause_end_is_refused_as_before():
    api.create_interval("x", every=1, **COMMON)
    with pytest.raises(ValidationError, match="timezone-aware"):
        api.pause("x", until=datetime(2999, 1, 1))
