"""Bulk create and bulk cancel over REST: all or nothing through the Python bulk API, each
bad item named by index and field with the single create's messages, the item limit
refused before any item is read, the same permissions and tenancy as the other endpoints."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.enums import ScheduleState
from django_dsched.models import Event, Schedule
from django_dsched.rest.bulk import Blanks, BulkCancelView, BulkCreateView
from django_dsched.rest.schedules import ScheduleViewSet
from django_dsched.runtime.clock import database_now
from tests.rest.conftest import INTERVAL, APIClient

pytestmark = pytest.mark.django_db

BULK = "schedules/bulk/"
CANCEL = "schedules/bulk-cancel/"
ONCE = {
    "kind": "ONCE",
    "name": "reminder-1",
    "at": "2031-01-01T09:00:00+01:00",
    "topic": "mail",
    "event_type": "reminder.send",
    "key": "order-1:reminder",
    "data": {"user": 1},
}
CRON = {
    "kind": "CRON",
    "name": "nightly",
    "cron": "0 2 * * *",
    "time_zone": "Europe/Brussels",
    "topic": "reports",
    "event_type": "report.build",
}
GOOD = [ONCE, {**INTERVAL, "name": "every-30s"}, CRON]

# Items the single create refuses, the first ones for their shape (types, unknown or
# missing fields), the others for the model's and the services' rules.
BAD_SHAPE = [
    {**INTERVAL, "name": "b-type", "every": "5"},
    {**INTERVAL, "name": "b-unknown", "colour": "red"},
    {**INTERVAL, "name": "b-naive", "start": "2031-01-01T00:00:00"},
    {"kind": "ONCE", "name": "b-missing"},
    {**INTERVAL, "name": "b-kind", "kind": "WEEKLY"},
]
BAD_RULES = [
    {**CRON, "name": "b-cron", "cron": "61 * * * *"},
    {**INTERVAL, "name": "b-unit", "unit": None},
    {**INTERVAL, "name": "b-end", "start": "2031-01-02T00:00:00Z", "end": "2031-01-01T00:00:00Z"},
    {**INTERVAL, "name": "b-topic", "topic": "bad topic"},
    {**ONCE, "name": "b-zone", "key": None, "time_zone": "Mars/Olympus"},
    {**INTERVAL, "name": "b-key", "key": "a\tb"},
    {**INTERVAL, "name": "b-data", "data": {"k\x00": 1}},
    {**CRON, "name": "b-never", "start": "2031-01-01T03:00:00Z", "end": "2031-01-01T04:00:00Z"},
]


def single_errors(client: APIClient, item: dict[str, Any]) -> dict[str, list[str]]:
    response = client.post("schedules/", item)
    assert response.status_code == 400, (item, response.body)
    errors: dict[str, list[str]] = response.body["errors"]
    return errors


def nothing_written() -> bool:
    return not Schedule.objects.exists() and not Event.objects.exists()


# -- creating ---------------------------------------------------------------------------


def test_a_mix_of_kinds_is_created_in_item_order_with_their_audit_events(root):
    response = root.post(BULK, GOOD)
    assert response.status_code == 201, response.body
    body = response.body
    assert (body["created"], body["existing"]) == (3, 0)
    assert [r["name"] for r in body["results"]] == ["reminder-1", "every-30s", "nightly"]
    assert [r["kind"] for r in body["results"]] == ["ONCE", "INTERVAL", "CRON"]
    assert {r["outcome"] for r in body["results"]} == {"created"}
    for result, item in zip(body["results"], GOOD, strict=True):
        schedule = Schedule.objects.get(pk=result["id"])
        assert schedule.origin == "REST"
        assert schedule.event_topic == item["topic"]
        # Each result is the schedule as a read of it shows it.
        read = root.get(f"schedules/{result['id']}/").body
        assert {k: read[k] for k in result if k != "outcome"} == {
            k: v for k, v in result.items() if k != "outcome"
        }
    assert Schedule.objects.get(schedule_name="reminder-1").event_data == {"user": 1}
    assert Schedule.objects.get(schedule_name="nightly").time_zone == "Europe/Brussels"
    events = Event.objects.filter(event_type="dsched.schedule.created")
    assert events.count() == 3
    assert {event.payload["actor"] for event in events} == {"root"}


def test_the_items_are_stored_as_the_single_create_stores_them(root, api_as):
    """The same body, item by item through the single create and all at once in bulk,
    gives the same definitions (ONCE with a time zone, an interval's ignored cron...)."""
    items = [
        {**ONCE, "key": None, "time_zone": "Europe/Brussels", "every": 3},
        {**INTERVAL, "cron": "* * * * *", "priority": 7, "jitter_seconds": 5},
        {**CRON, "end": "2040-01-01T00:00:00Z", "max_fires": 3, "misfire_policy": "SKIP"},
    ]
    fields = [
        "schedule_kind",
        "frequency_time",
        "frequency_unit",
        "cron_expression",
        "time_zone",
        "end_ts",
        "max_fires",
        "misfire_policy",
        "priority",
        "jitter_seconds",
        "event_topic",
        "event_type",
        "event_data",
        "idempotency_key",
        "origin",
    ]
    for item in items:
        assert root.post("schedules/", item).status_code == 201
    singles = list(Schedule.objects.order_by("schedule_name").values_list(*fields))
    Schedule.objects.all().delete()
    assert root.post(BULK, items).status_code == 201
    assert list(Schedule.objects.order_by("schedule_name").values_list(*fields)) == singles


def test_known_keys_give_the_existing_schedules_unchanged(root):
    first = root.post("schedules/", ONCE).body
    other = {**ONCE, "name": "reminder-2", "key": "order-2:reminder"}
    response = root.post(BULK, [{**other}, {**ONCE, "name": "renamed", "data": {"x": 1}}])
    assert response.status_code == 201, response.body
    created, existing = response.body["results"]
    assert (created["outcome"], existing["outcome"]) == ("created", "existing")
    assert existing["id"] == first["id"] and existing["name"] == "reminder-1"
    assert (response.body["created"], response.body["existing"]) == (1, 1)
    assert Schedule.objects.get(pk=first["id"]).event_data == {"user": 1}
    assert Schedule.objects.count() == 2

    # Nothing new: 200, as the single create answers a known key.
    again = root.post(BULK, [ONCE, other])
    assert again.status_code == 200, again.body
    assert [r["outcome"] for r in again.body["results"]] == ["existing", "existing"]
    assert [r["id"] for r in again.body["results"]] == [first["id"], created["id"]]
    assert Schedule.objects.count() == 2


@pytest.mark.parametrize(
    "bad", [BAD_SHAPE + BAD_RULES, BAD_RULES], ids=["shapes-and-rules", "rules-only"]
)
def test_each_bad_item_gets_the_single_creates_errors_under_its_index(root, bad):
    items: list[dict[str, Any]] = []
    expected: dict[str, list[str]] = {}
    for n, item in enumerate(bad):
        items.append({**INTERVAL, "name": f"good-{n}"})  # good items between the bad ones
        index = len(items)
        items.append(item)
        for field, messages in single_errors(root, item).items():
            expected[f"{index}.{field}"] = messages
    assert nothing_written()
    response = root.post(BULK, items)
    assert response.status_code == 400, response.body
    assert response.body["code"] == "invalid"
    assert response.body["errors"] == expected
    assert nothing_written()


def test_a_key_or_a_name_twice_in_one_call_is_an_error_on_the_later_item(root):
    items = [
        ONCE,
        {**ONCE, "name": "reminder-2"},  # the same key
        {**INTERVAL, "name": "reminder-1"},  # the same name
    ]
    response = root.post(BULK, items)
    assert response.status_code == 400
    assert response.body["errors"] == {
        "1.key": ["Item 0 has the same key."],
        "2.name": ["Item 0 has the same name."],
    }
    assert nothing_written()


def test_a_name_in_use_is_named_on_the_item_with_the_single_creates_message(root):
    assert root.post("schedules/", INTERVAL).status_code == 201
    message = single_errors(root, INTERVAL)["non_field_errors"]
    before = Event.objects.count()
    response = root.post(BULK, [ONCE, INTERVAL])
    assert response.status_code == 400
    assert response.body["errors"] == {"1.name": message}
    # The first item was inserted, then undone with the whole call.
    assert Schedule.objects.count() == 1 and Event.objects.count() == before


def test_an_empty_list_creates_nothing(root):
    response = root.post(BULK, [])
    assert response.status_code == 200
    assert response.body == {"created": 0, "existing": 0, "results": []}


# -- limits -----------------------------------------------------------------------------


def test_more_items_than_the_limit_is_413_before_any_item_is_read(root, settings):
    settings.DSCHED_BULK_MAX_ITEMS = 3
    items = [{**INTERVAL, "name": f"s{n}"} for n in range(4)]
    for path, body in [
        (BULK, items),
        (CANCEL, {"ids": [str(uuid.uuid4()) for _ in range(2)], "keys": ["a", "b"]}),
    ]:
        with CaptureQueriesContext(connection) as queries:
            response = root.post(path, body)
        assert response.status_code == 413, response.body
        assert response.body["code"] == "too_many_items"
        assert "at most 3 items (DSCHED_BULK_MAX_ITEMS)" in response.body["detail"]
        assert "this one has 4" in response.body["detail"]
        # Authentication's queries only: no schedule was read, nothing written.
        assert not [q["sql"] for q in queries if "schedule_t" in q["sql"]]
    assert nothing_written()
    # At the limit: taken.
    assert root.post(BULK, items[:3]).status_code == 201


def test_an_anonymous_bulk_call_is_refused_before_its_body_is_read(settings):
    settings.DSCHED_BULK_MAX_ITEMS = 3
    items = [{**INTERVAL, "name": f"s{n}"} for n in range(4)]
    for path, body in [(BULK, items), (CANCEL, {"ids": [], "keys": ["a", "b", "c", "d"]})]:
        response = APIClient(None).post(path, body)
        assert response.status_code in (401, 403), response.body  # not the items' 413
    assert nothing_written()


def test_the_bulk_body_limit_is_its_own(root, settings):
    """Bulk bodies are bounded by DSCHED_API_MAX_BULK_BODY_BYTES, not by the single body's
    limit, nor by Django's DATA_UPLOAD_MAX_MEMORY_SIZE (the parser reads the stream)."""
    items = [{**INTERVAL, "name": f"s{n}"} for n in range(50)]
    size = len(json.dumps(items))
    settings.DSCHED_API_MAX_BODY_BYTES = 1000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.DSCHED_API_MAX_BULK_BODY_BYTES = size
    assert root.post(BULK, items).status_code == 201
    settings.DSCHED_API_MAX_BULK_BODY_BYTES = size - 1
    response = root.post(BULK, [{**item, "name": "x" + item["name"]} for item in items])
    assert response.status_code == 413 and response.body["code"] == "too_large"
    assert Schedule.objects.count() == 50
    # The single create keeps its own limit.
    big = {**INTERVAL, "name": "big", "data": {"pad": "x" * 2000}}
    assert root.post("schedules/", big).status_code == 413


def test_a_middleware_that_reads_the_body_brings_djangos_limit_back(root, settings):
    """What docs/api.md says to a project whose middleware reads ``request.body``: Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE then applies first (Django's 400, before the API); under it,
    the API reads Django's copy of the body, within its own limits."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.rest.middleware.reads_body"]
    items = [{**INTERVAL, "name": f"s{n}"} for n in range(50)]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = root.post(BULK, items)
    assert response.status_code == 400 and b"Bad Request" in response.content
    assert nothing_written()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    settings.DSCHED_API_MAX_BULK_BODY_BYTES = 1000
    response = root.post(BULK, items)
    assert response.status_code == 413 and response.body["code"] == "too_large"
    settings.DSCHED_API_MAX_BULK_BODY_BYTES = 100_000
    assert root.post(BULK, items).status_code == 201
    assert Schedule.objects.count() == 50


# -- malformed bodies -------------------------------------------------------------------


def post_raw(client: APIClient, path: str, raw: str) -> Any:
    return client.request("POST", path, raw)


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        ("{}", {"non_field_errors": ["Send a JSON array of schedules (objects), not an object."]}),
        ('"x"', {"non_field_errors": ["Send a JSON array of schedules (objects), not a string."]}),
        ("null", {"non_field_errors": ["Send a JSON array of schedules (objects), not null."]}),
        (
            '[1, "x", [], null, true]',
            {
                f"{n}.non_field_errors": [f"Each item must be a schedule (an object), not {what}."]
                for n, what in enumerate(["a number", "a string", "an array", "null", "a boolean"])
            },
        ),
    ],
)
def test_a_body_that_is_not_a_list_of_objects_is_a_clear_400(root, raw, errors):
    response = post_raw(root, BULK, raw)
    assert response.status_code == 400, response.body
    assert response.body["errors"] == errors
    assert nothing_written()


@pytest.mark.parametrize(
    ("path", "raw", "fragment"),
    [
        (BULK, "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (BULK, "[{]", "not valid JSON"),
        (BULK, '[{"every": NaN}]', "not allowed"),
        (CANCEL, '{"ids": [', "not valid JSON"),
        (CANCEL, "[]", "Expected a dictionary"),
        (CANCEL, '{"ids": "x"}', "Expected a list"),
        (CANCEL, '{"ids": ["not-a-uuid", 7]}', "ids.1"),
        (CANCEL, '{"keys": [""]}', "may not be blank"),
        (CANCEL, '{"keys": ["a\\u0000b"]}', "Null characters are not allowed"),
        (CANCEL, '{"keys": ["a\\ud800b"]}', "Surrogate characters are not allowed"),
        (CANCEL, '{"names": ["x"]}', "does not exist"),
    ],
)
def test_malformed_bodies_are_400_never_500(root, path, raw, fragment):
    api.create_interval("kept", every=1, topic="ops", event_type="ping")
    response = post_raw(root, path, raw)
    assert response.status_code == 400, response.body
    assert fragment in json.dumps(response.body), response.body
    response.content.decode("ascii")
    assert Schedule.objects.get().state == ScheduleState.ACTIVE
    assert Schedule.objects.count() == 1


# -- cancelling -------------------------------------------------------------------------


@pytest.fixture
def four() -> dict[str, Schedule]:
    """Two live schedules (one with a key), one cancelled, one completed."""
    common = {"topic": "ops", "event_type": "ping"}
    made = {
        "active": api.create_interval("active", every=1, **common),
        "keyed": api.create_once("keyed", delay=timedelta(hours=1), key="k-1", **common),
        "cancelled": api.create_interval("cancelled", every=1, **common),
        "completed": api.create_once("completed", at=database_now() + timedelta(days=1), **common),
    }
    api.cancel("cancelled")
    Schedule.objects.filter(schedule_name="completed").update(
        state=ScheduleState.COMPLETED, active=False
    )
    return made


def test_cancel_by_ids_and_keys_reports_each_item(root, four):
    ids = [str(four[name].pk) for name in ("active", "cancelled", "completed")]
    events = Event.objects.count()
    response = root.post(CANCEL, {"ids": ids, "keys": ["k-1"]})
    assert response.status_code == 200, response.body
    assert (response.body["cancelled"], response.body["skipped"]) == (2, 2)
    results = response.body["results"]
    assert [(r["name"], r["outcome"], r["state"]) for r in results] == [
        ("active", "cancelled", "CANCELLED"),
        ("cancelled", "skipped", "CANCELLED"),
        ("completed", "skipped", "COMPLETED"),
        ("keyed", "cancelled", "CANCELLED"),
    ]
    assert results[3]["key"] == "k-1" and results[3]["id"] == str(four["keyed"].pk)
    states = dict(Schedule.objects.values_list("schedule_name", "state"))
    assert states == {
        "active": "CANCELLED",
        "keyed": "CANCELLED",
        "cancelled": "CANCELLED",
        "completed": "COMPLETED",
    }
    assert Event.objects.count() == events + 2  # an audit event per schedule cancelled
    cancelled = Event.objects.filter(
        event_type="dsched.schedule.cancelled",
        aggregate_id__in=[four["active"].pk, four["keyed"].pk],
    )
    assert [e.metadata["actor"] for e in cancelled] == ["root", "root"]


def test_an_unknown_or_repeated_reference_cancels_nothing_and_is_named(root, four):
    active = str(four["active"].pk)
    response = root.post(
        CANCEL, {"ids": [active, str(uuid.uuid4()), active], "keys": ["k-1", "nope"]}
    )
    assert response.status_code == 400, response.body
    assert response.body["errors"] == {"ids.2": ["Given twice in this call."]}
    response = root.post(CANCEL, {"ids": [active, str(uuid.uuid4())], "keys": ["k-1", "nope"]})
    assert response.status_code == 400, response.body
    assert response.body["errors"] == {
        "ids.1": ["No such schedule."],
        "keys.1": ["No such schedule."],
    }
    assert Schedule.objects.get(pk=active).state == ScheduleState.ACTIVE
    assert Schedule.objects.get(idempotency_key="k-1").state == ScheduleState.ACTIVE


def test_a_schedule_named_by_its_id_and_its_key_is_given_twice(root, four):
    """Before, it was cancelled once but reported twice as cancelled (with ``cancelled: 1``)."""
    keyed = str(four["keyed"].pk)
    events = Event.objects.count()
    response = root.post(CANCEL, {"ids": [keyed], "keys": ["k-1"]})
    assert response.status_code == 400, response.body
    assert response.body["errors"] == {"keys.0": ["Given twice in this call."]}
    assert Schedule.objects.get(pk=keyed).state == ScheduleState.ACTIVE
    assert Event.objects.count() == events


def after_first_read(action: Callable[[], None]) -> Callable[..., Any]:
    """An execute wrapper running ``action`` (on the same connection, in the request's
    transaction) right after the first statement that reads the schedules."""
    done: list[bool] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        result = execute(sql, params, many, ctx)
        if not done and "schedule_t" in sql:
            done.append(True)
            action()
        return result

    return wrapper


def test_a_key_created_while_the_cancel_runs_never_gives_a_500(root, four):
    """A schedule created with a requested key between the cancel's statements: before, a
    separate read locked the rows, then the cancel found and cancelled the new one too, and
    the view's lookup of its row raised KeyError (a 500, the cancel committed). Now each
    item's result comes from the rows the cancel statement itself locked."""
    common = {"topic": "ops", "event_type": "ping"}

    def create() -> None:
        api.create_once("late", delay=timedelta(hours=1), key="k-late", **common)

    with connection.execute_wrapper(after_first_read(create)):
        response = root.post(CANCEL, {"ids": [str(four["active"].pk)], "keys": ["k-late"]})
    assert response.status_code == 400, response.body
    assert response.body["errors"] == {"keys.0": ["No such schedule."]}
    # Nothing cancelled (here the creation, made in the request's transaction, is undone too).
    assert Schedule.objects.get(pk=four["active"].pk).state == ScheduleState.ACTIVE
    assert (
        not Event.objects.filter(event_type="dsched.schedule.cancelled")
        .exclude(aggregate_id=four["cancelled"].pk)
        .exists()
    )


def test_a_schedule_deleted_before_the_cancel_locks_it_undoes_the_call(root, four):
    def delete() -> None:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM schedule_t WHERE schedule_id = %s", [four["keyed"].pk])

    events = Event.objects.count()
    with connection.execute_wrapper(after_first_read(delete)):
        response = root.post(CANCEL, {"ids": [str(four["active"].pk)], "keys": ["k-1"]})
    assert response.status_code == 400, response.body
    assert response.body["errors"] == {"keys.0": ["No such schedule."]}
    assert Schedule.objects.get(pk=four["active"].pk).state == ScheduleState.ACTIVE
    assert Event.objects.count() == events


def test_the_rest_cancel_runs_only_the_python_apis_two_statements(root, four):
    """The REST cancel reads the schedules only through bulk_cancel's two statements (whose
    plans tests/test_api_bulk.py checks: an index probe per item), no read of its own."""
    with CaptureQueriesContext(connection) as queries:
        response = root.post(CANCEL, {"ids": [str(four["active"].pk)], "keys": ["k-1"]})
    assert response.status_code == 200, response.body
    reads = [q["sql"] for q in queries.captured_queries if "schedule_t" in q["sql"]]
    assert len(reads) == 2, reads
    assert "CROSS JOIN LATERAL" in reads[0] and "FOR UPDATE" not in reads[0]
    assert reads[1].lstrip().startswith("WITH w AS")


def test_an_empty_cancel_changes_nothing(root, four):
    response = root.post(CANCEL, {})
    assert response.status_code == 200
    assert response.body == {"cancelled": 0, "skipped": 0, "results": []}


# -- permissions ------------------------------------------------------------------------


def test_bulk_create_needs_add_and_bulk_cancel_needs_cancel(api_as, four):
    adder, canceller = api_as("add_schedule"), api_as("cancel_schedule")
    body = {"ids": [str(four["active"].pk)]}
    assert canceller.post(BULK, [INTERVAL]).status_code == 403
    assert adder.post(CANCEL, body).status_code == 403
    assert Schedule.objects.count() == 4
    assert Schedule.objects.get(pk=four["active"].pk).state == ScheduleState.ACTIVE
    assert adder.post(BULK, [INTERVAL]).status_code == 201
    assert canceller.post(CANCEL, body).status_code == 200


def test_a_blank_schedule_is_what_the_model_makes():
    """The bulk create builds its unsaved schedules without Model.__init__; they must be
    the single create's ``Schedule(**fields)`` (every field not given at its default)."""
    fields = {"host_id": uuid.uuid4(), "origin": "API", "schedule_name": "x", "priority": 3}
    blanks = Blanks()
    made, model = blanks.make(**fields), Schedule(**fields)
    mine, theirs = dict(vars(made)), dict(vars(model))
    assert mine.pop("schedule_id") != theirs.pop("schedule_id")
    assert type(mine.pop("_state")) is type(theirs.pop("_state"))
    assert mine.keys() == theirs.keys()
    assert mine == theirs
    assert blanks.make(**fields).event_data is not made.event_data
    assert made._state.adding and made._state.db is None


@pytest.mark.parametrize("view", [BulkCreateView, BulkCancelView])
def test_the_bulk_views_authenticate_throttle_and_answer_as_the_others(view):
    """Same authentication, permission check, throttles (the project's), parser, renderer
    and error handler as the schedules' endpoints."""
    one, other = view(), ScheduleViewSet()
    assert [type(a) for a in one.get_authenticators()] == [
        type(a) for a in other.get_authenticators()
    ]
    for name in ("permission_classes", "throttle_classes", "parser_classes", "renderer_classes"):
        assert getattr(view, name) == getattr(ScheduleViewSet, name), name
    assert one.get_exception_handler() is other.get_exception_handler()
    assert view.permission_table is ScheduleViewSet.permission_table
