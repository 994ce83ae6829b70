"""The same mistake gets the same message over REST as from the Python API (docs/api.md
promises "the same messages"), field by field; and the same naming rule: a schedule created
without a name is named by its key, else its id, at both doors (issue 41)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from django_dsched import api
from django_dsched.enums import ScheduleOrigin
from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule

pytestmark = pytest.mark.django_db

BASE = {"topic": "mail", "event_type": "invoice.send"}
INTERVAL = {**BASE, "every": 1, "unit": "MONTHS"}
CRON = {**BASE, "cron": "0 9 * * *"}
FUTURE = "2031-01-01T09:00:00+00:00"

# (the Python API's call, its keywords, the REST body, the field both must name)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("interval", {"unit": "FORTNIGHTS"}, {"unit": "FORTNIGHTS"}, "unit"),
    (
        "interval",
        {"misfire_policy": "SOMETIMES"},
        {"misfire_policy": "SOMETIMES"},
        "misfire_policy",
    ),
    ("interval", {"every": 0}, {"every": 0}, "every"),
    ("interval", {"time_zone": "Mars/Olympus"}, {"time_zone": "Mars/Olympus"}, "time_zone"),
    ("interval", {"catch_up_limit": 0}, {"catch_up_limit": 0}, "catch_up_limit"),
    ("interval", {"jitter_seconds": -1}, {"jitter_seconds": -1}, "jitter_seconds"),
    ("interval", {"priority": 5000}, {"priority": 5000}, "priority"),
    ("interval", {"max_fires": 0}, {"max_fires": 0}, "max_fires"),
    ("interval", {"topic": "two words"}, {"topic": "two words"}, "topic"),
    ("interval", {"event_type": "-x"}, {"event_type": "-x"}, "event_type"),
    ("interval", {"name": "a\x07b"}, {"name": "a\x07b"}, "name"),
    # A rule of the table in Python (__all__), on the field it names over REST.
    ("interval", {"key": ""}, {"key": ""}, "__all__"),
    ("interval", {"data": {"x": "\x00"}}, {"data": {"x": "\x00"}}, "data"),
    ("cron", {"cron": "61 * * * *"}, {"cron": "61 * * * *"}, "cron"),
    ("cron", {"cron": "0 9 L * *"}, {"cron": "0 9 L * *"}, "cron"),
    ("cron", {"time_zone": "Nowhere/Else"}, {"time_zone": "Nowhere/Else"}, "time_zone"),
]


def python_errors(call: str, changes: dict[str, Any]) -> dict[str, list[str]]:
    create = api.create_interval if call == "interval" else api.create_cron
    fields = {**(INTERVAL if call == "interval" else CRON), "name": "python"}
    fields.update(changes)
    name = fields.pop("name")
    with pytest.raises(ValidationError) as refused:
        create(name, **fields)
    return refused.value.message_dict


def rest_errors(root: Any, call: str, changes: dict[str, Any]) -> dict[str, list[str]]:
    body = {**(INTERVAL if call == "interval" else CRON), "name": "rest"}
    body["kind"] = "INTERVAL" if call == "interval" else "CRON"
    body.update(changes)
    response = root.post("schedules/", body)
    assert response.status_code == 400, response.body
    errors: dict[str, list[str]] = response.body["errors"]
    return errors


@pytest.mark.parametrize(("call", "python", "rest", "field"), CASES)
def test_rest_says_what_the_python_api_says(root, call, python, rest, field):
    said = python_errors(call, python)
    answered = rest_errors(root, call, rest)
    assert field in said, said
    assert answered.get(rest.popitem()[0]) == said[field], (answered, said)
    assert not Schedule.objects.exists()


def test_an_unknown_choice_lists_the_choices_at_every_choice_field(root):
    """Every choice REST takes (body and query) lists the choices, as the Python API does."""
    kind = rest_errors(root, "interval", {"kind": "WEEKLY"})["kind"]
    assert kind == ["'WEEKLY' is not one of INTERVAL, CRON, ONCE, RRULE."]
    for path, params, field in (
        ("schedules/", {"state": "ON"}, "state"),
        ("schedules/", {"kind": "X"}, "kind"),
        ("outbox/", {"status": "SENT"}, "status"),
    ):
        response = root.get(path, params)
        assert response.status_code == 400, response.body
        (message,) = response.body["errors"][field]
        assert message.startswith(f"'{params[field]}' is not one of "), message


def test_a_schedule_without_a_name_is_named_by_its_key_then_its_id_at_both_doors(root):
    keyed = root.post("schedules/", {**INTERVAL, "kind": "INTERVAL", "key": "inv-42"})
    assert keyed.status_code == 201, keyed.body
    assert keyed.body["name"] == "inv-42"
    plain = root.post("schedules/", {**INTERVAL, "kind": "INTERVAL"})
    assert plain.status_code == 201, plain.body
    assert plain.body["name"] == plain.body["id"]
    assert api.create_interval(**INTERVAL, key="inv-43").schedule_name == "inv-43"
    made = api.create_interval(**INTERVAL)
    assert made.schedule_name == str(made.schedule_id)
    # A PUT without a name keeps it (as it keeps the start and the key).
    read = root.get(f"schedules/{keyed.body['id']}/")
    put = root.put(
        f"schedules/{keyed.body['id']}/",
        {**INTERVAL, "kind": "INTERVAL", "every": 2},
        **{"If-Match": read["ETag"]},
    )
    assert put.status_code == 200, put.body
    assert put.body["name"] == "inv-42"


def test_rest_made_schedules_say_so(root):
    made = root.post("schedules/", {**INTERVAL, "kind": "INTERVAL", "name": "r"})
    assert made.body["origin"] == ScheduleOrigin.REST == "REST"
    assert Schedule.objects.get().get_origin_display() == "REST API"


def test_a_one_shot_takes_its_zone_at_both_doors(root):
    """A "09:00 tomorrow in Sydney" one-shot: REST took ``time_zone`` on a ONCE and showed
    it on Sydney's clock; the Python API refused it ("Unknown options: time_zone"), so a
    one-shot made from code was shown in UTC only. Both doors take it, with one message."""
    sydney = "2031-01-02T09:00:00+11:00"
    rest = root.post(
        "schedules/", {**BASE, "kind": "ONCE", "at": sydney, "time_zone": "Australia/Sydney"}
    )
    assert rest.status_code == 201, rest.body
    made = api.create_once(
        at=datetime.fromisoformat(sydney), time_zone="Australia/Sydney", key="k", **BASE
    )
    assert made.time_zone == "Australia/Sydney"
    later = api.bulk_create(
        [api.Once(delay=timedelta(hours=1), time_zone="Asia/Kolkata", key="b", **BASE)]
    )
    assert later[0].time_zone == "Asia/Kolkata"
    shown = root.get(f"schedules/{made.pk}/").body
    assert shown["local"]["at"] == rest.body["local"]["at"] == sydney
    with pytest.raises(ValidationError) as refused:
        api.create_once(delay=timedelta(hours=1), time_zone="Mars/Olympus", **BASE)
    answered = root.post(
        "schedules/", {**BASE, "kind": "ONCE", "delay": 3600, "time_zone": "Mars/Olympus"}
    )
    assert answered.body["errors"]["time_zone"] == refused.value.message_dict["time_zone"]


@pytest.mark.parametrize(
    ("python", "rest", "field"),
    [
        ({}, {}, "at"),
        (
            {"at": datetime.fromisoformat(FUTURE), "delay": timedelta(minutes=1)},
            {"at": FUTURE, "delay": 60},
            "delay",
        ),
        ({"delay": timedelta(seconds=-1)}, {"delay": -1}, "delay"),
        ({"delay": timedelta(days=36_526)}, {"delay": 36_526 * 86_400}, "delay"),
    ],
    ids=["no-time", "at-and-delay", "negative", "too-long"],
)
def test_a_one_shots_time_gets_the_same_message_at_both_doors(root, python, rest, field):
    """A one-shot's time: the Python API said "Give either at= or delay=." (both missing
    and both given) and "The delay must not be negative." keyed by no field (its
    ``message_dict`` raised), REST said other words on ``at`` or ``delay``."""
    with pytest.raises(ValidationError) as refused:
        api.create_once(**BASE, **python)
    said = refused.value.message_dict
    answered = root.post("schedules/", {**BASE, "kind": "ONCE", **rest})
    assert answered.status_code == 400, answered.body
    assert answered.body["errors"] == said == {field: said[field]}
    assert not Schedule.objects.exists()
