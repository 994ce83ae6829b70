"""Edits (``changes.edits.save_schedule``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from django_dsched.changes import edits
from django_dsched.enums import FrequencyUnit
from django_dsched.models import Schedule
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db


def test_cancelled_schedules_cannot_be_edited():
    schedule = ScheduleFactory(cancelled=True)
    schedule.schedule_name = "renamed"
    with pytest.raises(ValidationError, match="cancelled"):
        edits.save_schedule(schedule, ["schedule_name"])
    assert Schedule.objects.get().schedule_name != "renamed"


def test_editing_the_grid_moves_next_run_to_the_first_future_slot(db_now):
    start = db_now() - timedelta(days=3, minutes=7)
    schedule = ScheduleFactory(start_ts=start, frequency_unit=FrequencyUnit.DAYS)
    schedule.frequency_unit = FrequencyUnit.HOURS
    edits.save_schedule(schedule, ["frequency_unit"])
    schedule.refresh_from_db()
    now = db_now()
    assert now <= schedule.next_run_ts < now + timedelta(hours=1)
    assert (schedule.next_run_ts - start) % timedelta(hours=1) == timedelta(0)
    assert schedule.aggregate_version == 2


def test_editing_other_fields_keeps_the_runtime_state_a_fire_wrote():
    schedule = ScheduleFactory()
    advanced = schedule.next_run_ts + timedelta(minutes=5)
    # A fire advanced the row after this instance was loaded.
    Schedule.objects.filter(pk=schedule.pk).update(
        next_run_ts=advanced, fire_count=5, aggregate_version=6
    )
    schedule.schedule_name = "renamed"
    edits.save_schedule(schedule, ["schedule_name"])
    fresh = Schedule.objects.get()
    assert fresh.schedule_name == "renamed"
    assert fresh.fire_count == 5
    assert fresh.next_run_ts == advanced
    assert fresh.aggregate_version == 7


def test_invalid_schedules_are_not_written():
    with pytest.raises(ValidationError) as excinfo:
        edits.save_schedule(
            Schedule(schedule_name="x", frequency_time=0, event_topic="", event_type="t")
        )
    assert {"frequency_time", "event_topic"} <= set(excinfo.value.message_dict)
    assert Schedule.objects.count() == 0


def test_a_new_schedule_without_start_fires_first_at_database_now(db_now):
    before = db_now()
    schedule = edits.save_schedule(
        Schedule(
            schedule_name="now",
            frequency_unit="MINUTES",
            frequency_time=5,
            event_topic="t",
            event_type="x",
        )
    )
    assert schedule.start_ts == schedule.next_run_ts
    assert before <= schedule.start_ts <= db_now()
    assert schedule.active
