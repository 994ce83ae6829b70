"""Who may call what: every endpoint, and every call that fires more than its endpoint
says (a resume that catches up, a create with a backlog) or shows what another created (a
create with an existing key), x (anonymous, no permission, each permission, the pairs that
allow those, superuser). The permissions are the capabilities of
django_dsched.changes.permissions, the admin's; a refused call changes nothing."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.test import Client, RequestFactory
from django.utils.crypto import get_random_string
from rest_framework.authtoken.models import Token

from django_dsched import api
from django_dsched.admin.outbox import OutboxMessageAdmin
from django_dsched.admin.schedule_actions import ACTIONS
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Calendar, Event, OutboxMessage, Schedule
from django_dsched.rest import permissions
from django_dsched.runtime.clock import database_now
from tests.rest.conftest import INTERVAL, APIClient, user_with

pytestmark = pytest.mark.django_db

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
VIEW = {"view_schedule", "change_schedule"}
VIEW_CALENDARS = {"view_calendar", "change_calendar"}
DEFINITION = {**INTERVAL, "name": "active", "every": 1, "unit": "MINUTES"}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # {active}, {paused}, {message}: ids made by the fixture
    needs: frozenset[str]  # any one of these codenames allows it
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: int = 200
    also: frozenset[str] = frozenset()  # and any one of these too (when not empty)
    session: bool = False  # a page of the site (a logged-in user), not the API (a token)

    def allows(self, codenames: set[str]) -> bool:
        return bool(self.needs & codenames) and (not self.also or bool(self.also & codenames))


ANY_VERSION = {"If-Match": "*"}
ENDPOINTS = {
    "list schedules": Endpoint("GET", "schedules/", frozenset(VIEW)),
    "create": Endpoint(
        "POST", "schedules/", frozenset({"add_schedule"}), {**INTERVAL, "name": "new"}, ok=201
    ),
    "read": Endpoint("GET", "schedules/{active}/", frozenset(VIEW)),
    "replace": Endpoint(
        "PUT", "schedules/{active}/", frozenset({"change_schedule"}), DEFINITION, ANY_VERSION
    ),
    "change": Endpoint(
        "PATCH", "schedules/{active}/", frozenset({"change_schedule"}), {"priority": 3}, ANY_VERSION
    ),
    "cancel": Endpoint(
        "DELETE", "schedules/{active}/", frozenset({"cancel_schedule"}), headers=ANY_VERSION
    ),
    "pause": Endpoint("POST", "schedules/{active}/pause/", frozenset({"pause_schedule"})),
    "resume": Endpoint("POST", "schedules/{paused}/resume/", frozenset({"pause_schedule"})),
    "trigger": Endpoint("POST", "schedules/{active}/trigger/", frozenset({"trigger_schedule"})),
    "backfill": Endpoint(
        "POST", "schedules/{active}/backfill/", frozenset({"trigger_schedule"}), "{range}"
    ),
    "preview": Endpoint("GET", "schedules/{active}/preview/", frozenset(VIEW)),
    "dry run": Endpoint("GET", "schedules/{active}/dry-run/?{range}", frozenset(VIEW)),
    "events": Endpoint("GET", "schedules/{active}/events/", frozenset(VIEW)),
    "deliveries": Endpoint("GET", "schedules/{active}/deliveries/", frozenset(VIEW)),
    "status by key": Endpoint("GET", "schedules/status/?key=active", frozenset(VIEW)),
    "list outbox": Endpoint(
        "GET", "outbox/", frozenset({"view_outboxmessage", "change_outboxmessage"})
    ),
    "read message": Endpoint(
        "GET", "outbox/{message}/", frozenset({"view_outboxmessage", "change_outboxmessage"})
    ),
    "retry": Endpoint("POST", "outbox/{message}/retry/", frozenset({"retry_outboxmessage"})),
    "discard": Endpoint(
        "POST", "outbox/{message}/discard/", frozenset({"discard_outboxmessage"}), ok=204
    ),
    "cluster": Endpoint(
        "GET", "cluster/", frozenset({"view_schedulerinstance", "change_schedulerinstance"})
    ),
    "bulk create": Endpoint(
        "POST",
        "schedules/bulk/",
        frozenset({"add_schedule"}),
        [{**INTERVAL, "name": "new"}],
        ok=201,
    ),
    "bulk cancel": Endpoint(
        "POST", "schedules/bulk-cancel/", frozenset({"cancel_schedule"}), "{cancel active}"
    ),
    "list calendars": Endpoint("GET", "calendars/", frozenset(VIEW_CALENDARS)),
    "create calendar": Endpoint(
        "POST", "calendars/", frozenset({"add_calendar"}), {"name": "new"}, ok=201
    ),
    "read calendar": Endpoint("GET", "calendars/{calendar}/", frozenset(VIEW_CALENDARS)),
    "replace calendar": Endpoint(
        "PUT", "calendars/{calendar}/", frozenset({"change_calendar"}), {"name": "ops"}
    ),
    "change calendar": Endpoint(
        "PATCH", "calendars/{calendar}/", frozenset({"change_calendar"}), {"weekend_days": []}
    ),
    "delete calendar": Endpoint(
        "DELETE", "calendars/{calendar}/", frozenset({"delete_calendar"}), ok=204
    ),
}
FIRE = frozenset({"trigger_schedule"})
# Calls of those endpoints that need more than the endpoint's permission, or answer less.
CALLS = {
    "resume catching up": Endpoint(
        "POST",
        "schedules/{paused}/resume/",
        frozenset({"pause_schedule"}),
        {"catch_up": True},
        also=FIRE,
    ),
    "create with a backlog": Endpoint(
        "POST", "schedules/", frozenset({"add_schedule"}), "{backlog}", ok=201, also=FIRE
    ),
    "bulk create with a backlog": Endpoint(
        "POST", "schedules/bulk/", frozenset({"add_schedule"}), "[{backlog}]", ok=201, also=FIRE
    ),
    "create with an existing key": Endpoint(
        "POST", "schedules/", frozenset({"add_schedule"}), {**INTERVAL, "key": "active"}
    ),
    "bulk create with an existing key": Endpoint(
        "POST", "schedules/bulk/", frozenset({"add_schedule"}), [{**INTERVAL, "key": "active"}]
    ),
    # Not the API: the site's metrics page, for a logged-in user (docs/observability.md).
    "metrics": Endpoint(
        "GET",
        "/dsched/metrics",
        frozenset({"view_schedulerinstance", "change_schedulerinstance"}),
        session=True,
    ),
}
MATRIX = {**ENDPOINTS, **CALLS}
CODENAMES = sorted(
    {
        "view_schedule",
        "add_schedule",
        "change_schedule",
        "pause_schedule",
        "cancel_schedule",
        "trigger_schedule",
        "view_outboxmessage",
        "change_outboxmessage",
        "retry_outboxmessage",
        "discard_outboxmessage",
        "view_schedulerinstance",
        "view_calendar",
        "add_calendar",
        "change_calendar",
        "delete_calendar",
    }
)
# The pairs that allow the calls needing two permissions, and a viewer who may also create.
PAIRS = [
    "pause_schedule+trigger_schedule",
    "add_schedule+trigger_schedule",
    "add_schedule+view_schedule",
]
ROLES = ["anonymous", "no permission", *CODENAMES, *PAIRS, "superuser"]


def codenames_of(role: str) -> set[str]:
    return set() if role in ("anonymous", "no permission", "superuser") else set(role.split("+"))


def make_world() -> dict[str, str]:
    """A due active schedule with past slots, a paused one that missed slots and catches
    up (CATCH_UP), a dead letter."""
    start = (database_now() - timedelta(minutes=10)).replace(second=0, microsecond=0)
    active = api.create_interval(
        "active", every=1, unit="MINUTES", start=start, key="active", topic="ops", event_type="ping"
    )
    paused = api.create_interval(
        "paused", every=1, start=start, misfire_policy="CATCH_UP", topic="ops", event_type="ping"
    )
    api.pause(paused)
    api.trigger(paused)
    message = OutboxMessage.objects.get(aggregate_id=paused.pk)
    OutboxMessage.objects.filter(pk=message.pk).update(status=DeliveryStatus.DELIVERY_FAILED)
    end = start + timedelta(minutes=2)
    window = {"start": start.isoformat(), "end": end.isoformat()}
    calendar = api.create_calendar("ops", weekend=[6])
    return {
        "calendar": str(calendar.pk),
        "active": str(active.pk),
        "paused": str(paused.pk),
        "message": str(message.pk),
        "range": "start={}&end={}".format(*(v.replace("+", "%2B") for v in window.values())),
        "range_body": window,  # type: ignore[dict-item]
    }


def make_user(role: str, index: int) -> User | None:
    if role == "anonymous":
        return None
    if role == "superuser":
        return User.objects.create_superuser("root", "root@example.com", "pw")
    return user_with(codenames_of(role), name=f"role-{index}")


@pytest.fixture(scope="module")
def made(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[dict[str, str], Any]]:
    """The world and a user of each role (with its token), made once for the module in a
    transaction its tests run within (each test's own is a savepoint in it, rolled back
    after the test, as always), rolled back after the module's last test. Within it the
    database's ``now()`` is the module's start (``clock_timestamp()``, which the package
    reads, moves on): what these tests assert (answers, and nothing changed by a refusal)
    does not read it. A transactional test or a live server cannot run within it
    (:func:`world` refuses them)."""
    with django_db_blocker.unblock(), transaction.atomic():
        world = make_world()
        users = {role: make_user(role, index) for index, role in enumerate(ROLES)}
        for user in users.values():
            if user is not None:
                Token.objects.create(user=user)
        yield world, users
        transaction.set_rollback(True)


@pytest.fixture
def world(made: tuple[dict[str, str], Any], db: None, request: Any) -> dict[str, str]:
    for name in ("transactional_db", "live_server"):
        if name in request.fixturenames:
            pytest.fail(f"{name} cannot run within the module's transaction (made)")
    return made[0]


@pytest.fixture
def client_for(made: tuple[dict[str, str], Any], db: None) -> Callable[[str], APIClient]:
    """A client of each role's user (anonymous: none)."""
    return lambda role: APIClient(made[1][role])


def snapshot() -> tuple[Any, ...]:
    """Everything a call could change."""
    return (
        sorted(Schedule.objects.values_list("schedule_name", "state", "aggregate_version")),
        Event.objects.count(),
        sorted(OutboxMessage.objects.values_list("id", "status")),
        sorted(Calendar.objects.values_list("name", "version")),
    )


def backlog(world: dict[str, Any]) -> dict[str, Any]:
    """A schedule that catches up on the ten minutes since its start as soon as it exists."""
    return {
        **INTERVAL,
        "name": "backlog",
        "every": 1,
        "unit": "MINUTES",
        "start": world["range_body"]["start"],
        "misfire_policy": "CATCH_UP",
        "catch_up_limit": 10_000,
    }


def body_of(endpoint: Endpoint, world: dict[str, Any]) -> Any:
    if endpoint.body == "{range}":
        return world["range_body"]
    if endpoint.body == "{cancel active}":
        return {"ids": [world["active"]]}
    if endpoint.body == "{backlog}":
        return backlog(world)
    if endpoint.body == "[{backlog}]":
        return [backlog(world)]
    return endpoint.body


def call(client: APIClient, endpoint: Endpoint, world: dict[str, Any]) -> Any:
    path = endpoint.path.format(**world)
    if endpoint.session and client.user is not None:
        client.client.force_login(client.user)
    return client.request(endpoint.method, path, body_of(endpoint, world), **endpoint.headers)


def shown(body: Any) -> set[str]:
    """The fields an answer shows of the schedule it gives."""
    return set(body["results"][0] if "results" in body else body)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", list(MATRIX))
def test_every_endpoint_needs_its_permission(name, role, world, client_for):
    endpoint = MATRIX[name]
    client = client_for(role)
    before = snapshot()
    response = call(client, endpoint, world)
    if role == "anonymous":
        assert response.status_code == 401
        scheme = "Bearer" if endpoint.session else "Token"
        assert response["WWW-Authenticate"].split()[0] == scheme
    elif role == "superuser" or endpoint.allows(codenames_of(role)):
        assert response.status_code == endpoint.ok, response.body
        if "existing key" in name:
            # The existing schedule is another's: shown whole only to who may view it.
            viewer = role == "superuser" or "view_schedule" in codenames_of(role)
            assert ("data" in response.body) is (viewer and name.startswith("create"))
            if not viewer:
                assert shown(response.body) == {"outcome", "id", "host_id", "key"}
                assert "ETag" not in response
            assert snapshot() == before
        return
    else:
        assert response.status_code == 403
        if not endpoint.session:
            assert response.body["code"] == "permission_denied"
    assert snapshot() == before


def test_the_matrix_covers_every_operation_of_the_schema():
    documented = {
        (method.upper(), path)
        for path, operations in yaml.safe_load(SCHEMA.read_text())["paths"].items()
        for method in operations
    }
    tested = {
        (
            e.method,
            "/" + re.sub(r"\{(active|paused|message|calendar)\}", "{id}", e.path.split("?")[0]),
        )
        for e in MATRIX.values()
        if not e.session
    }
    assert tested == documented


def test_the_schedule_actions_need_the_admins_permissions():
    """pause/resume, run now (trigger) and cancel: the admin action's permission."""
    rest = {"pause": "pause", "resume": "resume", "run_now": "trigger", "cancel": "destroy"}
    for admin_action, rest_action in rest.items():
        codename = f"dsched.{ACTIONS[admin_action].permission}_schedule"
        assert permissions.SCHEDULES[rest_action].permissions == (codename,), admin_action


@pytest.mark.parametrize("action", ["retry", "discard"])
def test_the_dead_letter_actions_need_the_admins_permissions(action):
    needed = permissions.OUTBOX[action].permissions
    user = user_with([needed[0].split(".")[1]])
    request = RequestFactory().get("/")
    request.user = User.objects.get(pk=user.pk)
    admin_check = getattr(OutboxMessageAdmin, f"has_{action}_permission")
    assert admin_check(None, request)
    request.user = User.objects.get(pk=user_with([], name="nobody").pk)
    assert not admin_check(None, request)


def test_a_session_write_needs_the_csrf_token(world):
    user = User.objects.create_superuser("browser", "b@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    path = f"/api/dsched/schedules/{world['active']}/pause/"
    response = client.post(path, "{}", content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert Schedule.objects.get(pk=world["active"]).state == "ACTIVE"

    token = get_random_string(32)  # what a page's {% csrf_token %} cookie would hold
    client.cookies["csrftoken"] = token
    response = client.post(
        path, "{}", content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert response.status_code == 200
    assert client.get("/api/dsched/schedules/").status_code == 200


def test_an_inactive_users_token_is_refused(world):
    user = user_with(["view_schedule"], name="gone")
    client = APIClient(user)
    User.objects.filter(pk=user.pk).update(is_active=False)
    response = client.get("schedules/")
    assert response.status_code == 401


def test_permissions_through_a_group_count(world):
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="operators")
    group.permissions.set(Permission.objects.filter(codename="pause_schedule"))
    user = user_with([], name="member")
    user.groups.add(group)
    response = APIClient(user).post(f"schedules/{world['active']}/pause/")
    assert response.status_code == 200


def test_the_authentication_classes_can_be_replaced(settings, world):
    settings.DSCHED_API_AUTHENTICATION_CLASSES = [
        "rest_framework.authentication.BasicAuthentication"
    ]
    user = user_with(["view_schedule"], name="basic")
    assert APIClient(user).get("schedules/").status_code == 401  # tokens are off now
    client = APIClient(None)
    client.headers["Authorization"] = "Basic " + base64.b64encode(b"basic:pw").decode()
    response = client.get("schedules/")
    assert response.status_code == 200
    assert len(response.body["results"]) == 2
