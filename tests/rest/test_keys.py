"""Idempotency keys over REST: a create with a key that exists answers 200 with the
existing schedule; the key is shown and refused when bad."""

from __future__ import annotations

import pytest

from django_dsched.models import Event, Schedule

pytestmark = pytest.mark.django_db

REMINDER = {
    "kind": "ONCE",
    "name": "reminder-42",
    "start": "2030-01-01T09:00:00+01:00",
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
    [("", "may not be blank"), ("a\tb", "printable characters only")],
)
def test_a_bad_key_is_a_400_naming_the_field(root, key, fragment):
    response = root.post("schedules/", {**REMINDER, "key": key})
    assert response.status_code == 400, response.body
    assert fragment in " ".join(response.body["errors"]["key"])
    assert not Schedule.objects.exists()
