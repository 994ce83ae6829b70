"""Schedules over REST: create, read, list, replace, change, cancel; the same validation
as the Python API (the same messages), optimistic concurrency with ETag / If-Match."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from django_dsched import api
from django_dsched.enums import ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.models import Event, Schedule
from django_dsched.rest.serializers.schedule_input import API_NAMES
from tests.helpers import lock_waiter, other_session, sql
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db

COMMON = {"topic": "reports", "event_type": "report.build"}


def created(root: Any, **fields: Any) -> dict[str, Any]:
    response = root.post("schedules/", {**INTERVAL, **fields})
    assert response.status_code == 201, response.body
    return response.body


def test_a_schedule_created_over_rest_is_read_back_with_its_next_fires_and_etag(root):
    response = root.post("schedules/", {**INTERVAL, "data": {"region": "eu"}, "priority": 5})
    assert response.status_code == 201
    body = response.body
    assert response["ETag"] == '"1"' and body["version"] == 1
    assert response["Location"].endswith(f"/api/dsched/schedules/{body['id']}/")
    schedule = Schedule.objects.get(pk=body["id"])
    assert (schedule.schedule_name, schedule.frequency_time, schedule.frequency_unit) == (
        "heartbeat",
        30,
        "SECONDS",
    )
    assert schedule.event_data == {"region": "eu"} and schedule.priority == 5
    assert schedule.origin == "REST"

    read = root.get(f"schedules/{body['id']}/")
    assert read.status_code == 200 and read["ETag"] == '"1"'
    expected = [t.isoformat().replace("+00:00", "Z") for t in api.preview(schedule, 5)]
    assert read.body["next_fires"] == expected
    assert read.body["description"] == "every 30 seconds"
    created_event = Event.objects.get(aggregate_id=schedule.pk)
    assert created_event.event_type == "dsched.schedule.created"
    assert created_event.payload["actor"] == "root"


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "CRON", "cron": "0 2 * * 1-5", "time_zone": "Europe/Brussels", "every": None},
        {"kind": "ONCE", "at": "2031-01-01T09:00:00+01:00", "every": None, "unit": None},
        {
            "kind": "INTERVAL",
            "every": 1,
            "unit": "MONTHS",
            "start": "2031-01-31T00:00:00Z",
            "end": "2032-01-31T00:00:00Z",
            "max_fires": 12,
            "misfire_policy": "CATCH_UP",
            "misfire_grace_seconds": 60,
            "catch_up_limit": 5,
            "jitter_seconds": 30,
            "priority": -3,
        },
    ],
    ids=["cron", "once", "interval-with-every-option"],
)
def test_every_kind_and_option_can_be_created(root, fields):
    body = created(root, **fields)
    schedule = Schedule.objects.get(pk=body["id"])
    for name, value in fields.items():
        model_name = {**{v: k for k, v in API_NAMES.items()}, "at": "start_ts"}[name]
        stored = getattr(schedule, model_name)
        if isinstance(stored, datetime):
            assert stored == datetime.fromisoformat(value)
        else:
            assert stored == ("" if value is None and name in ("unit", "cron") else value)


# Bad input the Python API refuses: the REST API refuses it on the same field, with the
# same message (both run the model's and the services' validation).
SAME_AS_PYTHON = [
    ("cron", {"kind": "CRON", "cron": "61 * * * *"}, {"cron": "61 * * * *"}, api.create_cron),
    (
        "time_zone",
        {"kind": "CRON", "cron": "0 0 * * *", "time_zone": "Mars/Base"},
        {"cron": "0 0 * * *", "time_zone": "Mars/Base"},
        api.create_cron,
    ),
    (
        "non_field_errors",
        {"kind": "CRON", "cron": "0 0 30 2 *"},
        {"cron": "0 0 30 2 *"},
        api.create_cron,
    ),
    (
        "end",
        {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"},
        {
            "every": 30,
            "unit": "SECONDS",
            "start": datetime(2026, 1, 2, tzinfo=UTC),
            "end": datetime(2026, 1, 1, tzinfo=UTC),
        },
        api.create_interval,
    ),
    ("topic", {"topic": "no spaces"}, {"every": 1, "topic": "no spaces"}, api.create_interval),
    ("every", {"every": None}, {"every": None}, api.create_interval),
    (
        "every",
        {"every": 101, "unit": "YEARS"},
        {"every": 101, "unit": "YEARS"},
        api.create_interval,
    ),
    ("data", {"data": ["not", "an", "object"]}, {"every": 1, "data": ["x"]}, api.create_interval),
]


@pytest.mark.parametrize(("field", "rest", "python", "create"), SAME_AS_PYTHON)
def test_bad_input_is_refused_with_the_python_apis_message(root, field, rest, python, create):
    response = root.post("schedules/", {**INTERVAL, **rest})
    assert response.status_code == 400
    assert response.body["code"] == "invalid" and response.body["status"] == 400
    kwargs = {**COMMON, **python}
    with pytest.raises(ValidationError) as refused:
        create("same-input", **kwargs)
    python_messages = {
        ("non_field_errors" if key == "__all__" else API_NAMES.get(key, key)): value
        for key, value in refused.value.message_dict.items()
    }
    assert response.body["errors"][field] == python_messages[field]
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"every": 0}, "every", "greater than or equal to 1"),
        ({"unit": "FORTNIGHTS"}, "unit", "is not one of SECONDS, MINUTES"),
        ({"start": "2026-01-01T00:00:00"}, "start", "timezone-aware"),
        ({"start": "yesterday"}, "start", "wrong format"),
        ({"max_fires": 0}, "max_fires", "greater than or equal to 1"),
        ({"jitter_seconds": 86_401}, "jitter_seconds", "less than or equal to 86400"),
        ({"name": "x" * 127}, "name", "no more than 126"),
        ({"name": "a\x00b"}, "name", "Null characters"),
        ({"crons": "* * * * *"}, "crons", "does not exist"),
        ({"kind": None}, "kind", "may not be null"),
        ({"name": 5}, "name", "Not a valid string"),
        ({"every": "5"}, "every", "valid integer"),
        ({"every": 5.0}, "every", "valid integer"),
        ({"every": True}, "every", "valid integer"),
        ({"host_id": 7}, "host_id", "Must be a valid UUID"),
    ],
)
def test_malformed_fields_are_400_with_messages_by_field(root, fields, field, fragment):
    response = root.post("schedules/", {**INTERVAL, **fields})
    assert response.status_code == 400
    assert fragment in " ".join(response.body["errors"][field])
    assert not Schedule.objects.exists()


def test_a_second_schedule_with_the_same_name_is_refused(root):
    created(root)
    response = root.post("schedules/", INTERVAL)
    assert response.status_code == 400
    assert "already exists" in str(response.body["errors"])
    assert Schedule.objects.count() == 1


def test_writes_of_a_schedule_need_if_match(root):
    schedule = created(root)
    path = f"schedules/{schedule['id']}/"
    for method, body in (("put", INTERVAL), ("patch", {"every": 5}), ("delete", None)):
        args = (path,) if body is None else (path, body)
        response = getattr(root, method)(*args)
        assert response.status_code == 428, method
        assert response.body["code"] == "precondition_required"
    assert Schedule.objects.get().aggregate_version == 1


def test_a_stale_version_is_412_with_the_current_schedule(root):
    schedule = created(root)
    path = f"schedules/{schedule['id']}/"
    api.trigger(schedule["id"])  # it fired since it was read: version 2
    for if_match in ('"1"', 'W/"2"', '"one"'):
        response = root.patch(path, {"every": 5}, **{"If-Match": if_match})
        assert response.status_code == 412, if_match
        assert response["ETag"] == '"2"'
        assert response.body["current"]["version"] == 2
        assert response.body["current"]["every"] == 30
    assert Schedule.objects.get().frequency_time == 30

    response = root.patch(path, {"every": 5}, **{"If-Match": '"7", "2"'})
    assert response.status_code == 200 and response.body["every"] == 5
    assert response["ETag"] == '"3"'
    response = root.patch(path, {"every": 6}, **{"If-Match": "*"})
    assert response.status_code == 200 and response["ETag"] == '"4"'


@pytest.mark.django_db(transaction=True)
def test_a_change_committed_while_the_edit_waits_for_the_row_is_412(root):
    """The pre-check passes, then another session changes the row before the edit locks
    it: the service's check under the lock refuses the edit (nothing is written)."""
    schedule = created(root)
    outcome: dict[str, Any] = {}

    with other_session() as other:
        sql("BEGIN", using=other)
        sql("SELECT 1 FROM schedule_t WHERE schedule_id = %s FOR UPDATE", [schedule["id"]], other)

        def edit() -> None:
            try:
                outcome["response"] = root.patch(
                    f"schedules/{schedule['id']}/", {"every": 5}, **{"If-Match": '"1"'}
                )
            finally:
                connection.close()

        thread = threading.Thread(target=edit)
        thread.start()
        # The statement's text may be cut short in pg_stat_activity (1 kB): match the
        # table, not the FOR UPDATE at its end.
        lock_waiter("SELECT %schedule_t%", what="the edit to wait for the row lock")
        sql(
            "UPDATE schedule_t SET aggregate_version = aggregate_version + 1 "
            "WHERE schedule_id = %s",
            [schedule["id"]],
            other,
        )
        sql("COMMIT", using=other)
        thread.join(10)

    response = outcome["response"]
    assert response.status_code == 412
    assert response.body["current"]["version"] == 2
    row = Schedule.objects.get()
    assert (row.frequency_time, row.aggregate_version) == (30, 2)


def test_put_replaces_the_definition_left_out_fields_take_their_defaults(root):
    schedule = created(root, priority=7, jitter_seconds=10, data={"a": 1})
    start = Schedule.objects.get().start_ts
    response = root.put(f"schedules/{schedule['id']}/", INTERVAL, **{"If-Match": '"1"'})
    assert response.status_code == 200
    row = Schedule.objects.get()
    assert (row.priority, row.jitter_seconds, row.event_data) == (0, 0, {})
    assert row.start_ts == start
    changes = Event.objects.get(event_type="dsched.schedule.edited").payload["changes"]
    assert set(changes) == {"priority", "jitter_seconds", "event_data"}


def test_patch_writes_only_what_it_sends(root):
    schedule = created(root, priority=7)
    response = root.patch(f"schedules/{schedule['id']}/", {"every": 5}, **{"If-Match": '"1"'})
    assert response.status_code == 200
    assert (response.body["every"], response.body["priority"]) == (5, 7)
    changes = Event.objects.get(event_type="dsched.schedule.edited").payload
    assert changes["changes"] == {"frequency_time": [30, 5]} and changes["actor"] == "root"


def test_an_edit_that_changes_nothing_keeps_the_version(root):
    schedule = created(root)
    response = root.patch(f"schedules/{schedule['id']}/", {"every": 30}, **{"If-Match": '"1"'})
    assert response.status_code == 200 and response["ETag"] == '"1"'


def test_a_schedule_cannot_move_to_another_host(root):
    schedule = created(root)
    response = root.patch(
        f"schedules/{schedule['id']}/",
        {"host_id": "11111111-1111-1111-1111-111111111111"},
        **{"If-Match": '"1"'},
    )
    assert response.status_code == 400 and "host_id" in response.body["errors"]


def test_delete_cancels_and_a_cancelled_schedule_is_history(root):
    schedule = created(root)
    path = f"schedules/{schedule['id']}/"
    response = root.delete(path, **{"If-Match": '"1"'})
    assert response.status_code == 200
    assert response.body["state"] == "CANCELLED" and response.body["next_fires"] == []
    assert Schedule.objects.get().state == ScheduleState.CANCELLED
    event = Event.objects.get(event_type="dsched.schedule.cancelled")
    assert event.payload["actor"] == "root"

    assert root.delete(path, **{"If-Match": "*"}).status_code == 409
    response = root.patch(path, {"every": 5}, **{"If-Match": '"2"'})
    assert response.status_code == 409
    assert response.body["errors"] == {}
    assert root.get(path).status_code == 200  # still readable


def test_an_unknown_or_malformed_id_is_a_json_404(root):
    for path in (
        "schedules/00000000-0000-0000-0000-000000000001/",
        "schedules/nope/",
        "schedules/a.b/",
        "schedules/x/y/z/",
        "outbox/nope/",
    ):
        response = root.get(path)
        assert response.status_code == 404, path
        assert response.body["code"] == "not_found"


def test_the_list_filters_and_pages_by_name(root):
    for index in range(7):
        created(root, name=f"job-{index}", topic="even" if index % 2 == 0 else "odd")
    created(root, name="cron-x", kind="CRON", cron="0 * * * *", every=None)
    api.pause("job-3")

    def names(query: str) -> list[str]:
        response = root.get(f"schedules/?{query}")
        assert response.status_code == 200, response.body
        return [row["name"] for row in response.body["results"]]

    assert names("state=PAUSED") == ["job-3"]
    assert names("kind=CRON") == ["cron-x"]
    assert names("topic=odd") == ["job-1", "job-3", "job-5"]
    assert names("search=OB-") == [f"job-{i}" for i in range(7)]
    assert names("event_type=nothing") == []

    seen, url = [], "schedules/?page_size=3&topic=even"
    while url:
        response = root.get(url)
        seen += [row["name"] for row in response.body["results"]]
        url = response.body["next"]
    assert seen == ["job-0", "job-2", "job-4", "job-6"]


@pytest.mark.parametrize(
    "query",
    [
        "state=SLEEPING",
        "page_size=0",
        "page_size=501",
        "cursor=%%%",
        "cursor=WyJhIl0",
        "cursor=WyJhXHUwMDAwIiwgIngiXQ",
        "stat=PAUSED",
        "topic=",
    ],
)
def test_bad_list_parameters_are_400(root, query):
    response = root.get(f"schedules/?{query}")
    assert response.status_code == 400, response.body


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("schedules/", {"search": "\n"}),
        ("schedules/", {"topic": " "}),
        ("schedules/", {"event_type": "\t"}),
        ("schedules/", {"name": " "}),
        ("outbox/", {"topic": " "}),
    ],
)
def test_a_filter_of_whitespace_matches_it_as_sent(root, path, params):
    """The schema takes " " (one character, no NUL); the filters used to trim it to a blank
    value and refuse it (schemathesis: schema-valid request rejected)."""
    created(root)
    response = root.get(path, params)
    assert response.status_code == 200, response.body
    assert response.body["results"] == []
