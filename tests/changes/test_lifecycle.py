from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models.expressions import RawSQL

from django_dsched.changes import cancels, edits, pauses
from django_dsched.counts import ChangeCount
from django_dsched.enums import FrequencyUnit, ScheduleState
from django_dsched.models import Schedule
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db


def states():
    return dict(Schedule.objects.values_list("schedule_name", "state"))


def test_pause_resume_cancel():
    a = ScheduleFactory(schedule_name="a")
    b = ScheduleFactory(schedule_name="b", paused=True)
    c = ScheduleFactory(schedule_name="c", cancelled=True)
    everything = Schedule.objects.all()

    assert pauses.pause(everything) == ChangeCount(changed=1, skipped=2)
    assert states() == {"a": "PAUSED", "b": "PAUSED", "c": "CANCELLED"}
    assert pauses.resume(everything) == ChangeCount(changed=2, skipped=1)
    assert states() == {"a": "ACTIVE", "b": "ACTIVE", "c": "CANCELLED"}
    assert cancels.cancel(Schedule.objects.filter(pk=a.pk)) == ChangeCount(1, 0)
    assert pauses.resume(Schedule.objects.filter(pk=a.pk)) == ChangeCount(0, 1)

    a.refresh_from_db()
    assert (a.state, a.active) == (ScheduleState.CANCELLED, False)
    assert a.aggregate_version == 4  # pause, resume, cancel
    b.refresh_from_db()
    assert b.active
    c.refresh_from_db()
    assert c.aggregate_version == 1


def test_a_cancel_takes_any_queryset_whose_sql_has_a_percent_sign_before_a_parameter():
    """The queryset becomes the cancel statement's subquery with its placeholders renamed:
    ``%%`` (a literal percent sign, here the modulo operator) right before a ``%s`` is
    still a percent sign followed by a parameter."""
    even = ScheduleFactory(schedule_name="even", fire_count=2)
    ScheduleFactory(schedule_name="odd", fire_count=3)
    selected = Schedule.objects.alias(rest=RawSQL("fire_count %%%s", [2])).filter(rest=0)
    assert list(selected) == [even]

    assert cancels.cancel(selected) == ChangeCount(changed=1, skipped=0)
    assert states() == {"even": "CANCELLED", "odd": "ACTIVE"}


def test_a_cancel_of_a_queryset_that_repeats_a_schedule_cancels_it_once():
    """A queryset may give a schedule twice (here a UNION ALL): it is locked, cancelled
    and audited once."""
    schedule = ScheduleFactory(schedule_name="a")
    once = Schedule.objects.filter(pk=schedule.pk)

    assert cancels.cancel(once.union(once, all=True)) == ChangeCount(changed=1, skipped=0)
    schedule.refresh_from_db()
    assert (schedule.state, schedule.aggregate_version) == (ScheduleState.CANCELLED, 2)


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
