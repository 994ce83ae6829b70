"""An edit is an edit, unless it ends the schedule (no fire ahead: a cancel in effect) or
makes it due at once (a run now): those also need the cancel / run-now permission."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_dsched import api
from django_dsched.models import Event, Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.scheduler import Scheduler

pytestmark = pytest.mark.django_db(transaction=True)  # the Scheduler has its own session

CHANGE = "change_schedule"


def iso(value: Any) -> str:
    return value.isoformat()


@pytest.fixture
def interval() -> Schedule:
    """Fired up to now by a scheduler: its next slot is ahead."""
    start = database_now() - timedelta(hours=1)
    api.create_interval("every-minute", every=1, start=start, topic="ops", event_type="x")
    Scheduler(instance_id="test").run_until_idle()
    return Schedule.objects.get()


@pytest.fixture
def one_shot() -> Schedule:
    at = database_now() + timedelta(days=1)
    return api.create_once("tomorrow", at=at, topic="ops", event_type="x")


def edit(client: Any, schedule: Schedule, fields: dict[str, Any]) -> Any:
    return client.patch(f"schedules/{schedule.pk}/", fields, **{"If-Match": "*"})


def ending(schedule: Schedule) -> dict[str, Any]:
    return {"end": iso(schedule.start_ts + timedelta(seconds=30))}


@pytest.mark.parametrize(
    ("fields", "needed"),
    [
        (ending, "cancel_schedule"),
        (lambda s: {**ending(s), "every": 2}, "cancel_schedule"),
        (lambda s: {"max_fires": s.fire_count + 1}, None),
        (lambda s: {"every": 2}, None),
    ],
    ids=["end-in-the-past", "completes-at-once", "a-limit-still-ahead", "plain-edit"],
)
def test_an_edit_that_ends_a_schedule_needs_the_cancel_permission(api_as, interval, fields, needed):
    values = fields(interval)
    response = edit(api_as(CHANGE), interval, values)
    if needed is None:
        assert response.status_code == 200, response.body
        return
    assert response.status_code == 403
    assert needed in response.body["detail"]
    assert Schedule.objects.get().aggregate_version == interval.aggregate_version
    assert not Event.objects.filter(event_type="dsched.schedule.edited").exists()

    response = edit(api_as(CHANGE, needed), interval, values)
    assert response.status_code == 200
    assert response.body["next_fires"] == []


def test_a_limit_already_reached_ends_it(api_as, interval):
    reached = {"max_fires": interval.fire_count}
    assert edit(api_as(CHANGE), interval, reached).status_code == 403
    assert edit(api_as(CHANGE, "cancel_schedule"), interval, reached).status_code == 200


def test_an_edit_that_makes_it_due_at_once_needs_the_run_now_permission(api_as, one_shot):
    past = {"at": iso(database_now() - timedelta(minutes=5))}
    response = edit(api_as(CHANGE), one_shot, past)
    assert response.status_code == 403 and "trigger_schedule" in response.body["detail"]
    assert Schedule.objects.get().start_ts == one_shot.start_ts

    response = edit(api_as(CHANGE, "trigger_schedule"), one_shot, past)
    assert response.status_code == 200
    assert Schedule.objects.get().next_run_ts <= database_now()


def test_moving_a_one_shot_later_needs_nothing_more(api_as, one_shot):
    later = {"at": iso(one_shot.start_ts + timedelta(days=1))}
    assert edit(api_as(CHANGE), one_shot, later).status_code == 200
