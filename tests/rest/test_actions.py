"""The actions over REST go through the same services as the admin and the Python API:
the same state rules, the same audit events (with the requesting user as actor)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_dsched import api
from django_dsched.changes import on_demand
from django_dsched.enums import ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db


def iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


@pytest.fixture
def schedule(root: Any) -> Schedule:
    response = root.post("schedules/", INTERVAL)
    assert response.status_code == 201
    return Schedule.objects.get(pk=response.body["id"])


def action(root: Any, schedule: Schedule, name: str, body: Any = None, **headers: str) -> Any:
    return root.post(f"schedules/{schedule.pk}/{name}/", body, **headers)


def audit_of(schedule: Schedule, verb: str) -> Event:
    return Event.objects.get(aggregate_id=schedule.pk, event_type=f"dsched.schedule.{verb}")


def test_pause_and_resume_write_the_same_audit_events_as_the_python_api(root, schedule):
    until = database_now() + timedelta(days=1)
    response = action(root, schedule, "pause", {"reason": "quarter close", "until": iso(until)})
    assert response.status_code == 200, response.body
    assert response.body["state"] == "PAUSED" and response["ETag"] == '"2"'
    assert response.body["paused_reason"] == "quarter close"
    rest_event = audit_of(schedule, "paused")

    twin = api.create_interval("twin", every=30, unit="SECONDS", topic="ops", event_type="ping")
    api.pause(twin, reason="quarter close", until=until, actor="root")
    python_event = audit_of(twin, "paused")
    assert rest_event.payload.keys() == python_event.payload.keys()
    assert rest_event.payload["actor"] == python_event.payload["actor"] == "root"
    assert rest_event.payload["changes"] == python_event.payload["changes"]

    assert action(root, schedule, "pause").status_code == 409
    response = action(root, schedule, "resume", {"catch_up": True})
    assert response.status_code == 200 and response.body["state"] == "ACTIVE"
    assert audit_of(schedule, "resumed").payload["catch_up"] is True
    response = action(root, schedule, "resume")
    assert response.status_code == 409 and response.body["code"] == "state_conflict"
    response = action(root, schedule, "resume", {"catch_up": 0})
    assert response.status_code == 400 and "catch_up" in response.body["errors"]


def test_a_pause_that_ends_in_the_past_is_refused_by_the_service(root, schedule):
    response = action(root, schedule, "pause", {"until": "2001-01-01T00:00:00Z"})
    assert response.status_code == 400
    assert response.body["errors"] == {"non_field_errors": ["The pause must end in the future."]}
    assert Schedule.objects.get().state == ScheduleState.ACTIVE


def test_trigger_fires_once_through_the_exactly_once_path(root, schedule):
    response = action(root, schedule, "trigger")
    assert response.status_code == 200
    assert response.body["fired"] == 1
    assert response.body["schedule"]["fire_count"] == 1
    fire = Event.objects.get(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
    assert fire.metadata["trigger"] == "manual" and fire.metadata["actor"] == "root"
    assert OutboxMessage.objects.get().id == fire.id

    api.cancel(schedule)
    response = action(root, schedule, "trigger")
    assert response.status_code == 409
    assert OutboxMessage.objects.count() == 1


def test_actions_honour_an_if_match_when_sent(root, schedule):
    response = action(root, schedule, "trigger", **{"If-Match": '"9"'})
    assert response.status_code == 412 and response.body["current"]["version"] == 1
    assert not OutboxMessage.objects.exists()
    response = action(root, schedule, "pause", {}, **{"If-Match": '"1"'})
    assert response.status_code == 200


def test_backfill_fires_each_past_slot_once(root):
    start = database_now().replace(microsecond=0) - timedelta(hours=3)
    past = api.create_interval(
        "hourly", every=1, unit="HOURS", start=start, topic="ops", event_type="ping"
    )
    bounds = {"start": iso(start), "end": iso(start + timedelta(hours=2))}
    response = action(root, past, "backfill", bounds)
    assert response.status_code == 200, response.body
    assert (response.body["fired"], response.body["already_fired"]) == (3, 0)
    assert response.body["note"] is None
    response = action(root, past, "backfill", bounds)
    assert (response.body["fired"], response.body["already_fired"]) == (0, 3)
    assert response.body["note"] is None
    assert Event.objects.filter(aggregate_id=past.pk, metadata__trigger="backfill").count() == 3

    response = action(
        root, past, "backfill", {"start": bounds["start"], "end": "2999-01-01T00:00:00Z"}
    )
    assert response.status_code == 400
    assert "past only" in response.body["errors"]["non_field_errors"][0]
    response = action(root, past, "backfill", {"start": bounds["start"]})
    assert response.status_code == 400 and "end" in response.body["errors"]


def test_a_backfill_of_a_range_without_a_slot_says_why(root):
    start = database_now().replace(microsecond=0) - timedelta(hours=3)
    hourly = api.create_interval(
        "hourly", every=1, unit="HOURS", start=start, topic="ops", event_type="ping"
    )
    before = {"start": iso(start - timedelta(days=2)), "end": iso(start - timedelta(days=1))}
    response = action(root, hourly, "backfill", before)
    assert response.status_code == 200, response.body
    assert (response.body["fired"], response.body["already_fired"]) == (0, 0)
    assert response.body["note"] == (
        f"No slot of this schedule falls between {start - timedelta(days=2):%Y-%m-%d %H:%M:%S} "
        f"UTC and {start - timedelta(days=1):%Y-%m-%d %H:%M:%S} UTC; it starts at "
        f"{start:%Y-%m-%d %H:%M:%S} UTC."
    )


def test_a_refused_cancel_names_the_schedules_state(root):
    reminder = api.create_once(
        "reminder", at=database_now() - timedelta(hours=1), topic="mail", event_type="send"
    )
    Schedule.objects.filter(pk=reminder.pk).update(state=ScheduleState.COMPLETED, active=False)
    response = root.delete(f"schedules/{reminder.pk}/", **{"If-Match": "*"})
    assert response.status_code == 409
    assert response.body["detail"] == (
        "reminder is completed (it fired its last slot). Only active, paused or set aside "
        "schedules can be cancelled."
    )


def test_preview_and_dry_run_are_computed_by_the_firing_code(root, schedule):
    response = root.get(f"schedules/{schedule.pk}/preview/?count=3")
    assert response.status_code == 200
    assert response.body["fires"] == [iso(t) for t in api.preview(schedule, 3)]
    assert root.get(f"schedules/{schedule.pk}/preview/?count=0").status_code == 400

    start = schedule.next_slot_ts
    end = start + timedelta(minutes=2)
    path = f"schedules/{schedule.pk}/dry-run/"
    response = root.get(path, {"start": iso(start), "end": iso(end), "limit": 3})
    assert response.status_code == 200
    expected = on_demand.slots_between(schedule, start, end, limit=3)
    assert response.body["fires"] == [iso(t) for t in expected] and len(expected) == 3
    assert response.body["fires"] == [
        iso(t) for name, t in api.dry_run(start, end, limit_per_schedule=3)
    ]

    api.pause(schedule)
    response = root.get(path, {"start": iso(start), "end": iso(end)})
    assert response.body["fires"] == []


def test_history_is_newest_first_in_pages_that_cover_it_all(root, schedule):
    api.pause(schedule, actor="alice")
    api.resume(schedule)
    for _ in range(3):
        api.trigger(schedule)
    expected = list(
        Event.objects.filter(aggregate_id=schedule.pk)
        .order_by("-aggregate_version")
        .values_list("aggregate_version", flat=True)
    )
    seen, url = [], f"schedules/{schedule.pk}/events/?page_size=2"
    while url:
        response = root.get(url)
        assert response.status_code == 200
        seen += [row["version"] for row in response.body["results"]]
        url = response.body["next"]
    assert seen == expected and len(seen) == 6

    fires = root.get(f"schedules/{schedule.pk}/events/?kind=fire").body["results"]
    assert [row["kind"] for row in fires] == ["fire"] * 3
    assert {row["trigger"] for row in fires} == {"manual"}
    changes = root.get(f"schedules/{schedule.pk}/events/?kind=change").body["results"]
    assert [row["type"] for row in changes] == [
        "dsched.schedule.resumed",
        "dsched.schedule.paused",
        "dsched.schedule.created",
    ]
    assert changes[1]["actor"] == "alice"

    OutboxMessage.objects.filter(aggregate_version=4).update(status="DELIVERY_FAILED")
    deliveries = root.get(f"schedules/{schedule.pk}/deliveries/").body["results"]
    assert [row["version"] for row in deliveries] == [6, 5, 4]
    failed = root.get(f"schedules/{schedule.pk}/deliveries/?status=DELIVERY_FAILED").body
    assert [row["version"] for row in failed["results"]] == [4]
