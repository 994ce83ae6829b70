"""Idempotency keys over REST: a create with a key that exists answers 200 with the
existing schedule; the key is shown and refused when bad; a delayed message's status is
read by its key."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db

REMINDER = {
    "kind": "ONCE",
    "name": "reminder-42",
    "at": "2030-01-01T09:00:00+01:00",
    "topic": "mail",
    "event_type": "reminder.send",
    "key": "order-42:reminder",
}


def test_the_same_key_twice_creates_once_and_answers_the_existing_schedule(root):
    first = root.post("schedules/", REMINDER)
    assert first.status_code == 201, first.body
    assert first.body["key"] == "order-42:reminder"
    again = root.post("schedules/", {**REMINDER, "name": "other", "data": {"x": 1}})
    assert again.status_code == 200, again.body
    assert again.body["id"] == first.body["id"]
    assert again.body["name"] == "reminder-42" and again.body["data"] == {}
    assert Schedule.objects.count() == 1
    assert Event.objects.count() == 1


@pytest.mark.parametrize(
    ("key", "fragment"),
    [("", "must not be empty"), ("a\tb", "printable characters only")],
)
def test_a_bad_key_is_a_400_naming_the_field(root, key, fragment):
    response = root.post("schedules/", {**REMINDER, "key": key})
    assert response.status_code == 400, response.body
    assert fragment in " ".join(response.body["errors"]["key"])
    assert not Schedule.objects.exists()


def status_of(root, key, **params):
    return root.get("schedules/status/", {"key": key, **params})


def test_a_delayed_messages_status_is_read_by_its_key_in_one_query(root):
    created = root.post("schedules/", REMINDER).body
    with CaptureQueriesContext(connection) as queries:
        response = status_of(root, "order-42:reminder")
    assert response.status_code == 200, response.body
    assert len([q for q in queries if "schedule_t" in q["sql"]]) == 1
    body = response.body
    assert (body["id"], body["name"], body["key"]) == (
        created["id"],
        "reminder-42",
        "order-42:reminder",
    )
    assert (body["state"], body["message_status"], body["last_delivery"]) == (
        "ACTIVE",
        "PENDING",
        None,
    )
    assert body["next_run"] == "2030-01-01T08:00:00Z"

    api.trigger(created["id"])  # fired: its message waits for delivery
    assert status_of(root, "order-42:reminder").body["message_status"] == "PENDING"
    messages = OutboxMessage.objects.filter(aggregate_id=created["id"])
    messages.update(status=DeliveryStatus.DELIVERED, delivered_ts=Now())
    body = status_of(root, "order-42:reminder").body
    assert (body["message_status"], body["last_delivery"]) == ("DELIVERED", "DELIVERED")
    messages.update(status=DeliveryStatus.DELIVERY_FAILED, delivered_ts=None, last_error="500")
    body = status_of(root, "order-42:reminder").body
    assert (body["message_status"], body["last_error"]) == ("DELIVERY_FAILED", "500")


def test_a_key_no_schedule_has_is_a_404_and_a_bad_query_a_400(root):
    root.post("schedules/", REMINDER)
    missing = status_of(root, "order-43:reminder")
    assert missing.status_code == 404, missing.body
    assert missing.body["code"] == "not_found"
    elsewhere = status_of(root, "order-42:reminder", host_id=str(uuid.UUID(int=9)))
    assert elsewhere.status_code == 400, elsewhere.body
    assert list(elsewhere.body["errors"]) == ["host_id"]
    for params in ({}, {"key": ""}, {"key": "k" * 127}, {"key": "k", "name": "x"}):
        response = root.get("schedules/status/", params)
        assert response.status_code == 400, (params, response.body)


def test_a_cancelled_keys_status_and_the_list_filtered_by_key(root):
    created = root.post("schedules/", REMINDER).body
    assert root.post("schedules/", INTERVAL).status_code == 201
    listed = root.get("schedules/", {"key": "order-42:reminder"}).body["results"]
    assert [item["id"] for item in listed] == [created["id"]]
    cancel = root.post("schedules/bulk-cancel/", {"keys": ["order-42:reminder"]})
    assert cancel.status_code == 200, cancel.body
    body = status_of(root, "order-42:reminder").body
    assert (body["state"], body["message_status"], body["next_run"]) == (
        "CANCELLED",
        "CANCELLED",
        None,
    )


def test_an_edit_keeps_the_key_and_cannot_change_it(root):
    """A PUT that leaves `key` out used to reset it to none: a retried create with that key
    then made a second schedule."""
    created = root.post("schedules/", REMINDER)
    path = f"schedules/{created.body['id']}/"
    without_key = {name: value for name, value in REMINDER.items() if name != "key"}
    replaced = root.put(
        path, {**without_key, "at": "2030-01-02T09:00:00+01:00"}, **{"If-Match": created["ETag"]}
    )
    assert replaced.status_code == 200, replaced.body
    assert replaced.body["key"] == "order-42:reminder"
    again = root.post("schedules/", REMINDER)
    assert (again.status_code, again.body["id"]) == (200, created.body["id"])
    for body in ({"key": "order-43:reminder"}, {"key": None}, {**REMINDER, "key": "other"}):
        method = root.put if "kind" in body else root.patch
        refused = method(path, body, **{"If-Match": replaced["ETag"]})
        assert refused.status_code == 400, refused.body
        assert list(refused.body["errors"]) == ["key"]
    same = root.patch(path, {"key": "order-42:reminder", "priority": 2}, **{"If-Match": "*"})
    assert same.status_code == 200, same.body
    assert Schedule.objects.get().idempotency_key == "order-42:reminder"
