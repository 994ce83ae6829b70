"""Pause, resume and cancel (``changes.pauses``, ``changes.cancels``)."""

from __future__ import annotations

import pytest
from django.db.models.expressions import RawSQL

from django_dsched.changes import cancels, pauses
from django_dsched.counts import ChangeCount
from django_dsched.enums import ScheduleState
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
