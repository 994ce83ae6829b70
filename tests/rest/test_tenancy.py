"""Tenancy: every request is scoped to the hosts its resolver gives. Another host's
schedule or message answers exactly like one that does not exist (404), on every endpoint."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Calendar, Event, OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.rest.conftest import INTERVAL, APIClient
from tests.rest.hosts import HOST_A, HOST_B
from tests.rest.test_permissions import ENDPOINTS

pytestmark = pytest.mark.django_db

COMMON = {"topic": "ops", "event_type": "ping"}


@pytest.fixture(autouse=True)
def resolver(settings: Any) -> None:
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"


def client(username: str) -> APIClient:
    return APIClient(User.objects.create_superuser(username, f"{username}@example.com", "pw"))


@pytest.fixture
def of_b() -> dict[str, Any]:
    """Host B's schedules (one paused) and a dead letter, and their untouched state."""
    start = (database_now() - timedelta(minutes=10)).replace(second=0, microsecond=0)
    active = api.create_interval(
        "mine", every=1, start=start, host_id=HOST_B, topic="ops", event_type="ping"
    )
    paused = api.create_interval("paused", every=1, host_id=HOST_B, topic="ops", event_type="x")
    api.pause(paused, host_id=HOST_B)
    api.trigger(active)
    message = OutboxMessage.objects.get()
    OutboxMessage.objects.update(status=DeliveryStatus.DELIVERY_FAILED)
    window = {"start": start.isoformat(), "end": (start + timedelta(minutes=2)).isoformat()}
    calendar = api.create_calendar("ops", host_id=HOST_B)
    return {
        "calendar": str(calendar.pk),
        "active": str(active.pk),
        "paused": str(paused.pk),
        "message": str(message.pk),
        "range": urlencode(window),
        "range_body": window,
    }


def state() -> tuple[Any, ...]:
    return (
        sorted(Schedule.objects.values_list("schedule_name", "state", "aggregate_version")),
        Event.objects.count(),
        sorted(OutboxMessage.objects.values_list("id", "status")),
        sorted(Calendar.objects.values_list("name", "version")),
    )


DETAIL = [name for name, e in ENDPOINTS.items() if "{" in e.path.split("?")[0]]


@pytest.mark.parametrize("name", DETAIL)
def test_another_hosts_things_are_not_found_exactly_like_missing_ones(name, of_b):
    endpoint = ENDPOINTS[name]
    alice = client("alice-a")
    before = state()
    path = endpoint.path.format(**of_b)
    body = of_b["range_body"] if endpoint.body == "{range}" else endpoint.body
    theirs = alice.request(endpoint.method, path, body, **endpoint.headers)
    missing = {
        k: str(uuid.uuid4()) if k in ("active", "paused", "message", "calendar") else v
        for k, v in of_b.items()
    }
    absent = alice.request(
        endpoint.method, endpoint.path.format(**missing), body, **endpoint.headers
    )
    assert theirs.status_code == absent.status_code == 404
    assert theirs.content == absent.content
    assert state() == before

    bob = client("bob-b")
    assert bob.request(endpoint.method, path, body, **endpoint.headers).status_code == endpoint.ok


def test_lists_show_the_requests_hosts_only(of_b):
    api.create_interval("mine", every=1, host_id=HOST_A, topic="ops", event_type="ping")
    alice, both = client("alice-a"), client("both-ab")
    assert [r["host_id"] for r in alice.get("schedules/").body["results"]] == [str(HOST_A)]
    assert alice.get("outbox/").body["results"] == []
    assert sorted(r["host_id"] for r in both.get("schedules/").body["results"]) == sorted(
        [str(HOST_A), str(HOST_B), str(HOST_B)]
    )
    assert len(both.get("outbox/").body["results"]) == 1


def test_a_schedule_is_created_in_the_first_host_or_an_allowed_one(of_b):
    both = client("both-ab")
    response = both.post("schedules/", INTERVAL)
    assert response.status_code == 201 and response.body["host_id"] == str(HOST_A)
    response = both.post("schedules/", {**INTERVAL, "host_id": str(HOST_B)})
    assert response.status_code == 201 and response.body["host_id"] == str(HOST_B)

    alice = client("alice-a")
    response = alice.post("schedules/", {**INTERVAL, "name": "x", "host_id": str(HOST_B)})
    assert response.status_code == 400 and "host_id" in response.body["errors"]
    assert not Schedule.objects.filter(schedule_name="x").exists()


def test_a_request_that_reaches_no_host_sees_nothing_and_creates_nothing(of_b):
    nobody = client("nobody-")
    assert nobody.get("schedules/").body["results"] == []
    response = nobody.post("schedules/", INTERVAL)
    assert response.status_code == 403
    assert Schedule.objects.count() == 2


def test_the_default_resolver_reaches_the_default_host_only(settings, of_b):
    del settings.DSCHED_API_HOST_RESOLVER
    root = client("root")
    assert root.get("schedules/").body["results"] == []
    assert root.get(f"schedules/{of_b['active']}/").status_code == 404
    response = root.post("schedules/", INTERVAL)
    assert response.body["host_id"] == str(uuid.UUID(int=0))


def test_bulk_create_reaches_the_requests_hosts_only(of_b):
    api.create_once("b-keyed", delay=timedelta(hours=1), key="k", host_id=HOST_B, **COMMON)
    alice, both = client("alice-a"), client("both-ab")
    keyed = {**INTERVAL, "name": "keyed", "key": "k"}
    response = alice.post("schedules/bulk/", [keyed, {**INTERVAL, "host_id": str(HOST_B)}])
    assert response.status_code == 400
    assert response.body["errors"] == {"1.host_id": ["You may not use this host."]}
    # Another host's key is not seen: the same key in A is a new schedule of A.
    response = alice.post("schedules/bulk/", [keyed])
    assert response.status_code == 201
    assert response.body["results"][0]["outcome"] == "created"
    assert response.body["results"][0]["host_id"] == str(HOST_A)
    # A request that reaches both hosts may name either; the first is the default.
    response = both.post("schedules/bulk/", [INTERVAL, {**INTERVAL, "host_id": str(HOST_B)}])
    assert response.status_code == 201
    assert [r["host_id"] for r in response.body["results"]] == [str(HOST_A), str(HOST_B)]
    assert client("nobody-").post("schedules/bulk/", [INTERVAL]).status_code == 403


def test_bulk_cancel_cannot_reach_another_hosts_schedules(of_b):
    api.create_once("b-keyed", delay=timedelta(hours=1), key="k", host_id=HOST_B, **COMMON)
    alice = client("alice-a")
    before = state()
    for field, theirs, missing in [
        ("ids", of_b["active"], str(uuid.uuid4())),
        ("keys", "k", "no-such-key"),
    ]:
        found = alice.post("schedules/bulk-cancel/", {field: [theirs]})
        absent = alice.post("schedules/bulk-cancel/", {field: [missing]})
        assert found.status_code == absent.status_code == 400
        assert found.content == absent.content  # exactly like one that does not exist
    response = alice.post(
        "schedules/bulk-cancel/", {"ids": [of_b["active"]], "host_id": str(HOST_B)}
    )
    assert response.status_code == 400 and "host_id" in response.body["errors"]
    assert client("nobody-").post("schedules/bulk-cancel/", {"keys": ["k"]}).status_code == 403
    assert state() == before

    both = client("both-ab")
    response = both.post(
        "schedules/bulk-cancel/",
        {"ids": [of_b["active"]], "keys": ["k"], "host_id": str(HOST_B)},
    )
    assert response.status_code == 200, response.body
    assert response.body["cancelled"] == 2
    assert Schedule.objects.get(pk=of_b["active"]).state == "CANCELLED"


def test_status_by_key_reaches_the_requests_hosts_only(of_b):
    api.create_once("b-keyed", delay=timedelta(hours=1), key="k", host_id=HOST_B, **COMMON)
    alice, both = client("alice-a"), client("both-ab")
    theirs = alice.get("schedules/status/", {"key": "k"})
    absent = alice.get("schedules/status/", {"key": "no-such-key"})
    assert theirs.status_code == absent.status_code == 404
    assert theirs.content == absent.content
    named = alice.get("schedules/status/", {"key": "k", "host_id": str(HOST_B)})
    assert named.status_code == 400 and list(named.body["errors"]) == ["host_id"]
    # A request that reaches both hosts reads its first one unless it names another.
    assert both.get("schedules/status/", {"key": "k"}).status_code == 404
    found = both.get("schedules/status/", {"key": "k", "host_id": str(HOST_B)})
    assert found.status_code == 200 and found.body["name"] == "b-keyed"
    assert client("nobody-").get("schedules/status/", {"key": "k"}).status_code == 403
