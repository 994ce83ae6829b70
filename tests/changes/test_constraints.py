from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import CheckConstraint

from django_dsched.changes.constraints import FieldCache, plainly_valid_event_data
from django_dsched.models import Schedule
from django_dsched.models.conditions import OneOf, array_literal, differs
from tests.factories import ScheduleFactory
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db

VALID = {
    "schedule_name": "nightly",
    "frequency_unit": "DAYS",
    "frequency_time": 1,
    "event_topic": "reports",
    "event_type": "report.build",
    "event_data": {"format": "pdf"},
}


def errors_for(**changes):
    schedule = Schedule(**{**VALID, **changes})
    with pytest.raises(ValidationError) as excinfo:
        schedule.full_clean()
    return excinfo.value.message_dict


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"frequency_time": 0}, "frequency_time", "greater than or equal to 1"),
        ({"frequency_time": -5}, "frequency_time", "greater than or equal to 1"),
        ({"frequency_time": 101, "frequency_unit": "YEARS"}, "frequency_time", "100 years"),
        ({"frequency_unit": "FORTNIGHTS"}, "frequency_unit", "not a valid choice"),
        ({"event_topic": ""}, "event_topic", "cannot be blank"),
        ({"event_type": ""}, "event_type", "cannot be blank"),
        ({"event_topic": "has space"}, "event_topic", "letters, digits"),
        ({"schedule_name": "x" * 127}, "schedule_name", "at most 126"),
        ({"event_data": [1, 2]}, "event_data", "JSON object"),
        ({"event_data": "text"}, "event_data", "JSON object"),
        ({"event_data": {"a": float("nan")}}, "event_data", "NaN"),
        ({"event_data": {"a": "nul\x00"}}, "event_data", "NUL"),
        ({"event_data": {"a": "\ud800"}}, "event_data", "surrogate"),
        ({"event_data": {"big": "x" * 70_000}}, "event_data", "the limit is 65536"),
        ({"start_ts": datetime(2026, 1, 1)}, "start_ts", "timezone-aware"),
    ],
)
def test_model_validation_refuses_bad_values(changes, field, fragment):
    messages = errors_for(**changes)
    assert field in messages
    assert fragment in " ".join(messages[field])


def test_deep_event_data_is_refused():
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["n"] = {}
        node = node["n"]
    assert "nested deeper than 32" in errors_for(event_data=deep)["event_data"][0]


def test_names_are_unique_per_host():
    ScheduleFactory(schedule_name="nightly")
    assert "__all__" in errors_for()


def test_a_valid_schedule_passes():
    Schedule(**VALID).full_clean()


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("frequency_time = 0", "dsched_schedule_frequency_positive"),
        ("frequency_unit = 'FORTNIGHTS'", "dsched_schedule_unit_valid"),
        ("state = 'SLEEPING', active = false", "dsched_schedule_state_valid"),
        ("active = false", "dsched_schedule_active_matches_state"),
        ("schedule_name = ''", "dsched_schedule_name_not_empty"),
        ("event_topic = ''", "dsched_schedule_topic_valid"),
        ("event_type = 'a b'", "dsched_schedule_type_valid"),
        ("event_data = '[1]'", "dsched_schedule_event_data_object"),
        ("schedule_kind = 'DAILY'", "dsched_schedule_kind_valid"),
        ("misfire_policy = 'LATER'", "dsched_schedule_misfire_policy_valid"),
        ("origin = 'ELSEWHERE'", "dsched_schedule_origin_valid"),
        ("state = 'PAUSED'", "dsched_schedule_active_matches_state"),
        ("idempotency_key = ''", "dsched_schedule_key_not_empty"),
        ("frequency_unit = ''", "dsched_schedule_interval_complete"),
        ("frequency_time = NULL", "dsched_schedule_interval_complete"),
        ("schedule_kind = 'CRON', cron_expression = ''", "dsched_schedule_cron_complete"),
        ("end_ts = start_ts", "dsched_schedule_end_after_start"),
        ("max_fires = 0", "dsched_schedule_max_fires_positive"),
        ("misfire_grace_seconds = -1", "dsched_schedule_timing_bounds"),
        # A NULL grace leaves the other bounds deciding (FALSE AND NULL is FALSE).
        ("misfire_grace_seconds = NULL, catch_up_limit = 0", "dsched_schedule_timing_bounds"),
        ("misfire_grace_seconds = NULL, jitter_seconds = 86401", "dsched_schedule_timing_bounds"),
    ],
)
def test_database_constraints_refuse_what_slips_past_validation(assignment, constraint):
    ScheduleFactory()
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        sql(f"UPDATE schedule_t SET {assignment}")


@pytest.mark.parametrize(
    "assignment",
    [
        "end_ts = NULL, max_fires = NULL, misfire_grace_seconds = NULL, idempotency_key = NULL",
        "end_ts = start_ts + interval '1 second', max_fires = 1, misfire_grace_seconds = 0",
        "schedule_kind = 'ONCE', frequency_unit = '', frequency_time = NULL",
        "schedule_kind = 'CRON', cron_expression = '0 2 * * *', frequency_unit = ''",
        "state = 'PAUSED', active = false",
        "idempotency_key = 'order-1'",
    ],
)
def test_database_constraints_let_valid_rows_through(assignment):
    """The CHECK conditions are written short (models/conditions.py): NULL where a column is
    optional passes, as the longer ``x IS NULL OR ...`` let it."""
    ScheduleFactory()
    sql(f"UPDATE schedule_t SET {assignment}")


@pytest.mark.parametrize("status", ["SENT", "pending", ""])
def test_the_outbox_refuses_an_unknown_status(status):
    (message,) = make_messages()
    with pytest.raises(IntegrityError, match="dsched_outbox_status_valid"), transaction.atomic():
        sql("UPDATE outbox_message_t SET status = %s WHERE id = %s", [status, message])
    for known in ("DELIVERY_FAILED", "PENDING"):
        sql("UPDATE outbox_message_t SET status = %s WHERE id = %s", [known, message])


ODD_CHOICES = ['a"b', "c\\d", "e,f", "{g}", " h ", "", "NULL", "it's", "%s", 'x\\"y', "é"]


def test_one_of_holds_exactly_its_choices_whatever_their_characters():
    """The array constant a OneOf writes reads back as the choices, as DDL and as a
    parameter (the migration's CHECK text and Django's validate() query)."""
    literal = array_literal(ODD_CHOICES)
    assert sql("SELECT %s::text[]", [literal])[0][0] == ODD_CHOICES
    with connection.schema_editor() as editor:
        as_ddl = editor.quote_value(literal)
    assert sql(f"SELECT {as_ddl}::text[]")[0][0] == ODD_CHOICES
    condition = OneOf("schedule_name", ODD_CHOICES)
    assert condition.deconstruct() == (
        "django_dsched.models.conditions.OneOf",
        ("schedule_name", ODD_CHOICES),
        {},
    )
    assert condition == OneOf("schedule_name", list(ODD_CHOICES))
    assert condition != OneOf("schedule_name", ODD_CHOICES[:-1])
    check = CheckConstraint(condition=condition, name="odd")
    for name, allowed in [("e,f", True), ("x", False), ("NULL", True), ("{g}", True)]:
        schedule = Schedule(schedule_name=name)
        if allowed:
            check.validate(Schedule, schedule)
        else:
            with pytest.raises(ValidationError):
                check.validate(Schedule, schedule)


def test_one_of_and_differs_refuse_what_would_make_a_check_pass_everything():
    with pytest.raises(TypeError):
        OneOf("state", "ACTIVE")  # a string is a sequence of letters
    with pytest.raises(TypeError):
        OneOf("state", [1, 2])
    with pytest.raises(TypeError):
        differs("idempotency_key", None)


# The bulk path's shortcut for event data accepts only what the full validation accepts.
ODD_EVENT_DATA = [
    {},
    {"user": 1, "tags": ["a", "b"], "nested": {"x": [1, 2.5, None, True]}},
    {"emoji": "\U0001f600"},  # a pair of surrogates in the JSON text: left to the full check
    {"nul": "a\x00b"},
    {"lone": "\ud800"},
    {"nan": float("nan")},
    {"inf": float("-inf")},
    {"when": datetime(2030, 1, 1)},
    {(1, 2): "tuple key"},
    {1: "int key"},
    {"big": "x" * 70_000},
    {"deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
    {"brackets in text": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["},
    {"backslash": "\\u0000 \\ud800"},
    ["a", "list"],
    "text",
    None,
]


def _nested(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _n in range(depth):
        value = [value]
    return {"deep": value}


ODD_EVENT_DATA.append(_nested(10_000))  # past Python's recursion limit


@pytest.mark.parametrize("value", ODD_EVENT_DATA, ids=range(len(ODD_EVENT_DATA)))
def test_the_event_data_shortcut_never_accepts_what_clean_refuses(value):
    field = Schedule._meta.get_field("event_data")
    try:
        field.clean(value, None)
        valid = True
    except ValidationError:
        valid = False
    assert not plainly_valid_event_data(value) or valid
    # What it accepts (the common case, so that the shortcut is taken at all).
    if value in ({}, ODD_EVENT_DATA[1], {1: "int key"}):
        assert plainly_valid_event_data(value) and valid


def test_a_generated_name_shortcut_matches_uuid_text_only():
    cache = FieldCache()
    (accept,) = [entry[-1] for entry in cache._fields if entry[1] == "schedule_name"]
    assert accept is not None
    assert accept(str(uuid.uuid4()))
    for name in ["nightly", str(uuid.uuid4()).upper(), str(uuid.uuid4()) + "\n", "x" * 36, 36]:
        assert not accept(name)
