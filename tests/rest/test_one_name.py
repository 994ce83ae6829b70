"""One thing, one name at every door (issue 26): a one-shot's time is `at` (or `delay`)
over REST as in the Python API and declarations; `start` is the other kinds'. A schedule
can be found by its exact name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_dsched import api
from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db

AT = "2031-01-01T09:00:00+01:00"
ONCE = {"kind": "ONCE", "name": "reminder", "topic": "mail", "event_type": "reminder.send"}


def test_a_one_shot_is_created_with_at_and_answers_at(root):
    response = root.post("schedules/", {**ONCE, "at": AT})
    assert response.status_code == 201, response.body
    assert response.body["at"] == "2031-01-01T08:00:00Z"
    assert response.body["start"] is None
    assert Schedule.objects.get().start_ts == datetime(2031, 1, 1, 8, tzinfo=UTC)
    read = root.get(f"schedules/{response.body['id']}/").body
    assert (read["at"], read["start"]) == ("2031-01-01T08:00:00Z", None)


def test_the_other_kinds_answer_start_and_no_at(root):
    body = root.post("schedules/", {**INTERVAL, "start": "2031-01-01T00:00:00Z"}).body
    assert (body["start"], body["at"]) == ("2031-01-01T00:00:00Z", None)


def test_a_one_shot_after_a_delay_in_seconds(root):
    before = database_now()
    response = root.post("schedules/", {**ONCE, "delay": 90})
    assert response.status_code == 201, response.body
    start = Schedule.objects.get().start_ts
    assert before + timedelta(seconds=90) <= start <= database_now() + timedelta(seconds=90)
    assert response.body["at"] == start.isoformat().replace("+00:00", "Z")


def test_start_on_a_one_shot_is_refused_with_a_message_naming_at(root):
    response = root.post("schedules/", {**ONCE, "start": AT})
    assert response.status_code == 400
    assert list(response.body["errors"]) == ["start"]
    (message,) = response.body["errors"]["start"]
    assert "send at instead of start" in message
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"at": AT, "delay": 60}, "delay", "Give at or delay, not both."),
        ({}, "at", "needs its time: at (a time), or delay"),
        ({"delay": -1}, "delay", "The delay must not be negative."),
        (
            {"delay": 3_155_760_001},
            "delay",
            "at most 100 years (36,525 days: 3,155,760,000 seconds)",
        ),
        ({"delay": "PT5M"}, "delay", "valid integer"),
        ({"at": None}, "at", "may not be null"),
    ],
)
def test_a_one_shots_time_is_at_or_delay(root, fields, field, fragment):
    response = root.post("schedules/", {**ONCE, **fields})
    assert response.status_code == 400
    assert fragment in " ".join(response.body["errors"][field]), response.body
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("at", AT), ("delay", 60)])
def test_at_and_delay_are_refused_on_the_other_kinds(root, field, value):
    response = root.post("schedules/", {**INTERVAL, field: value})
    assert response.status_code == 400
    (message,) = response.body["errors"][field]
    rest = "schedules; an interval or cron schedule starts at start."
    assert message == f"{field} is for one-shot (ONCE) {rest}"


def test_a_one_shots_end_is_refused_with_the_python_apis_message(root):
    response = root.post("schedules/", {**ONCE, "at": AT, "end": "2031-01-01T07:00:00Z"})
    assert response.status_code == 400
    with pytest.raises(ValidationError) as refused:
        api.create_once(
            at=datetime.fromisoformat(AT),
            end=datetime(2031, 1, 1, 7, tzinfo=UTC),
            topic="mail",
            event_type="reminder.send",
        )
    assert response.body["errors"]["end"] == refused.value.message_dict["end"]
    assert refused.value.message_dict["end"] == [
        "The end must be after the time the one-shot fires."
    ]


def test_an_edit_moves_a_one_shot_by_at_and_refuses_start(root):
    created = root.post("schedules/", {**ONCE, "at": AT})
    path = f"schedules/{created.body['id']}/"
    moved = root.patch(path, {"at": "2031-02-01T00:00:00Z"}, **{"If-Match": created["ETag"]})
    assert moved.status_code == 200, moved.body
    assert moved.body["at"] == "2031-02-01T00:00:00Z"
    refused = root.patch(path, {"start": AT}, **{"If-Match": moved["ETag"]})
    assert refused.status_code == 400 and "start" in refused.body["errors"]
    later = root.patch(path, {"delay": 3600}, **{"If-Match": moved["ETag"]})
    assert later.status_code == 200, later.body
    assert Schedule.objects.get().start_ts > database_now() + timedelta(minutes=59)
    # A PUT without at keeps it, as a PUT without start keeps an interval's start.
    kept = root.put(path, ONCE, **{"If-Match": later["ETag"]})
    assert kept.status_code == 200, kept.body
    assert kept.body["at"] == later.body["at"]


def test_bulk_items_use_at_and_delay_too(root):
    response = root.post(
        "schedules/bulk/",
        [
            {**ONCE, "name": "r1", "at": AT},
            {**ONCE, "name": "r2", "delay": 60},
            {**ONCE, "name": "r3", "start": AT},
        ],
    )
    assert response.status_code == 400
    assert list(response.body["errors"]) == ["2.start"]
    ok = root.post(
        "schedules/bulk/", [{**ONCE, "name": "r1", "at": AT}, {**ONCE, "name": "r2", "delay": 60}]
    )
    assert ok.status_code == 201, ok.body
    assert Schedule.objects.get(schedule_name="r2").start_ts > database_now()


def test_the_list_finds_a_schedule_by_its_exact_name(root):
    for name in ("nightly", "nightly-report", "Nightly"):
        assert root.post("schedules/", {**INTERVAL, "name": name}).status_code == 201
    found = root.get("schedules/", {"name": "nightly"}).body["results"]
    assert [schedule["name"] for schedule in found] == ["nightly"]
    assert root.get("schedules/", {"name": "night"}).body["results"] == []
