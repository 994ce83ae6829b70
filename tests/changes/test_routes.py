"""Every door refuses a schedule whose topic no route grants to its host, on the topic, in
the relay's own words, and writes nothing; the operator's host is served as before."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched import api
from django_dsched.changes import Once, save_schedule
from django_dsched.changes.edits import check_edit
from django_dsched.declared import problem
from django_dsched.exceptions import BulkValidationError, ValidationError
from django_dsched.models import Event, Schedule
from tests.rest.conftest import APIClient, user_with
from tests.rest.hosts import HOST_B

pytestmark = pytest.mark.django_db

WHY = (
    f"This topic is not delivered: topic 'celery' is not granted to host {HOST_B}: its route "
    "'celery' in DSCHED_TRANSPORTS serves other hosts"
)


@pytest.fixture(autouse=True)
def routes(settings: Any) -> None:
    """The operator's Celery route (no HOSTS: its own host alone); handlers for everyone."""
    settings.DSCHED_TRANSPORTS = {
        "celery": {"BACKEND": "celery", "OPTIONS": {"TASK": "reports.build"}},
        "*": {"BACKEND": "handlers", "HOSTS": "*"},
    }
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"


def nothing_written() -> bool:
    return not Schedule.objects.exists() and not Event.objects.exists()


def test_the_python_api_with_a_host_refuses_it():
    with pytest.raises(ValidationError) as refused:
        api.create_once("x", delay=timedelta(0), topic="celery", event_type="e", host_id=HOST_B)
    assert any(m.startswith(WHY) for m in refused.value.message_dict["topic"])
    assert nothing_written()
    # The operator's host, and another topic of B's, are served.
    api.create_once("mine", delay=timedelta(0), topic="celery", event_type="e")
    api.create_once("theirs", delay=timedelta(0), topic="notes", event_type="e", host_id=HOST_B)


def test_a_bulk_create_names_the_item():
    specs = [
        Once(name="ok", delay=timedelta(0), topic="notes", event_type="e", host_id=HOST_B),
        Once(name="no", delay=timedelta(0), topic="celery", event_type="e", host_id=HOST_B),
    ]
    with pytest.raises(BulkValidationError) as refused:
        api.bulk_create(specs)
    ((index, field, message),) = refused.value.item_errors
    assert (index, field) == (1, "topic") and message.startswith(WHY)
    assert nothing_written()


def test_rest_refuses_it_in_a_single_and_a_bulk_create():
    client = APIClient(user_with(["view_schedule", "add_schedule"], name="mallory-b"))
    body = {"name": "x", "kind": "ONCE", "delay": 0, "topic": "celery", "event_type": "e"}

    single = client.post("schedules/", body)
    bulk = client.post("schedules/bulk/", [{**body, "topic": "notes"}, body])

    assert single.status_code == 400 and single.body["errors"]["topic"][0].startswith(WHY)
    assert bulk.status_code == 400, bulk.body
    assert WHY in str(bulk.body)
    assert nothing_written()


def test_an_edit_to_a_topic_not_granted_is_refused_and_other_edits_go_on(settings):
    schedule = api.create_interval("n", every=60, topic="notes", event_type="e", host_id=HOST_B)
    schedule.event_topic = "celery"
    with pytest.raises(ValidationError) as refused:
        save_schedule(schedule, ["event_topic"])
    assert refused.value.messages[0].startswith(WHY)
    assert Schedule.objects.get(pk=schedule.pk).event_topic == "notes"
    # A grant narrowed later: the schedule's other edits are not refused for it.
    settings.DSCHED_TRANSPORTS = {"notes": {"BACKEND": "handlers"}}
    stored = Schedule.objects.get(pk=schedule.pk)
    stored.priority = 5
    save_schedule(stored, ["priority"])
    assert Schedule.objects.get(pk=schedule.pk).priority == 5


def test_the_admin_shows_it_on_the_topic_field_when_adding_and_editing(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    form = {
        "schedule_name": "x",
        "host_id": str(HOST_B),
        "schedule_kind": "INTERVAL",
        "frequency_time": "60",
        "frequency_unit": "SECONDS",
        "time_zone": "UTC",
        "jitter_seconds": "0",
        "priority": "0",
        "misfire_policy": "COALESCE",
        "catch_up_limit": "100",
        "event_topic": "celery",
        "event_type": "e",
        "event_data": "{}",
    }
    response = client.post(reverse("admin:dsched_schedule_add"), form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["event_topic"][0].startswith(WHY)
    assert nothing_written()
    # An edit says the same before anything is saved (what the admin's form asks).
    schedule = api.create_interval("n", every=60, topic="notes", event_type="e", host_id=HOST_B)
    schedule.event_topic = "celery"
    with pytest.raises(ValidationError, match="not granted to host"):
        check_edit(schedule, ["event_topic"], may_complete=True, may_fire=True)


def test_a_declaration_for_a_host_its_route_does_not_serve_is_reported():
    spec = {"every": 60, "topic": "celery", "event_type": "e", "host_id": str(HOST_B)}
    why = problem("declared", spec)
    assert why is not None and WHY in why
    assert problem("declared", {**spec, "host_id": None}) is None


def test_the_operators_host_with_no_route_at_all_is_let_through(settings):
    settings.DSCHED_TRANSPORTS = {"reports": {"BACKEND": "handlers"}}
    api.create_once("later", delay=timedelta(0), topic="billing", event_type="e")
    with pytest.raises(ValidationError, match="no route of DSCHED_TRANSPORTS"):
        api.create_once(
            "theirs", delay=timedelta(0), topic="billing", event_type="e", host_id=uuid.uuid4()
        )
