"""Property-based fuzzing of every endpoint, from the checked-in schema (docs/openapi.yaml),
against the project's WSGI application on real PostgreSQL (schemathesis + Hypothesis), in
process and in autocommit, as in production: each request commits its own work (the HTTP
server itself is tested by tests/integration/test_rest_e2e.py).

Each operation gets generated requests (valid and invalid) as three users in turn, each
with a token: a superuser of both hosts, a user of both hosts who may only view, and a
superuser of one host (the other host's things are then "not found"). The users take the
requests of one run of the operation in turn (one seeded database, one set of generated
cases, each case sent as one of them), so every operation is fuzzed as each of them. About
half the valid requests aim at schedules and messages that exist, with their current
version in If-Match (and bulk cancels at them), so the fuzzing reaches the code behind the
404, the 412 and a bulk cancel's success. Every check schemathesis has runs on every
answer: no 5xx, the status code, content type, headers and body the schema documents, a
schema-invalid request refused, and a schema-valid one accepted, except where the server
refuses it for a rule the schema cannot state (:data:`BEYOND_THE_SCHEMA`: an unknown time
zone, a cron expression, a name in use, a cursor the server did not give...).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Permission, User
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.rest.hosts import HOST_A, HOST_B

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
# Generated requests per operation and user (more with FUZZ_EXAMPLES=...); the same ones on
# every run unless FUZZ_RANDOM=1 (then new ones each time: for hunting, not for CI).
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
RANDOM = os.environ.get("FUZZ_RANDOM") == "1"

schema = schemathesis.openapi.from_path(str(SCHEMA_PATH))
# The requests, and the checks' own, go to the project's WSGI application in this process.
schema.app = get_wsgi_application()

# The users, by name (tests.rest.hosts.by_username: the letters after "-" are its hosts).
VIEW = ["view_schedule", "view_outboxmessage", "view_schedulerinstance", "view_calendar"]
USERS = {"root-ab": None, "viewer-ab": VIEW, "tenant-a": None}  # None: a superuser

# The fields of a 400 that a schema-valid request may get, by operation: rules the schema
# cannot state (across fields, or about what exists). A 400 naming any other field, or any
# other answer a valid request should not get, is a failure ("schema-valid request
# rejected"). A bulk create's fields are named "<index>.<field>".
DEFINITION = {
    # The kind's own fields (a one-shot's time is at or delay, the others' start), a real
    # zone and cron expression, a timing that fires at all,
    # a jitter shorter than the interval, data within the size and depth limits, a name
    # and key not in use, a host the request may reach.
    "name",
    "kind",
    "every",
    "unit",
    "cron",
    "time_zone",
    "start",
    "at",
    "delay",
    "end",
    "max_fires",
    "misfire_grace_seconds",
    "jitter_seconds",
    "data",
    "key",
    "host_id",
    "non_field_errors",
    # A valid recurrence rule for its kind, calendars that exist and the host may use.
    "rrule",
    "calendars",
    "overlap_policy",  # a one-shot's is ALLOW_ALL (docs/overlap.md)
}
# A calendar: a name not in use, a known country with its years (at most 50), not every
# day a weekend day, windows that are complete, a host the request may reach.
CALENDAR = {
    "name",
    "host_id",
    "country",
    "subdivision",
    "first_year",
    "last_year",
    "weekend_days",
    "windows",
    "non_field_errors",
}
BEYOND_THE_SCHEMA = {
    ("GET", "/schedules/"): {"cursor"},  # a cursor comes from a next link
    ("GET", "/outbox/"): {"cursor"},
    ("GET", "/schedules/{id}/events/"): {"cursor"},
    ("GET", "/schedules/{id}/deliveries/"): {"cursor"},
    ("POST", "/schedules/"): DEFINITION,
    ("PUT", "/schedules/{id}/"): DEFINITION,
    ("PATCH", "/schedules/{id}/"): DEFINITION,
    ("POST", "/schedules/bulk/"): DEFINITION,
    # A host the request may reach; ids and keys that name its schedules, once each.
    ("POST", "/schedules/bulk-cancel/"): {"host_id", "ids", "keys"},
    ("GET", "/schedules/status/"): {"host_id"},
    # The end of a backfill is past, after its start, within the retention, and the
    # range holds at most 10,000 slots.
    ("POST", "/schedules/{id}/backfill/"): {"start", "end", "non_field_errors"},
    ("POST", "/schedules/{id}/pause/"): {"until", "non_field_errors"},  # in the future
    ("GET", "/calendars/"): {"cursor"},
    ("POST", "/calendars/"): CALENDAR,
    ("PUT", "/calendars/{id}/"): CALENDAR,
    ("PATCH", "/calendars/{id}/"): CALENDAR,
}


@dataclass
class Known:
    """What exists in the database now (the fuzz run adds what it creates)."""

    schedules: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    calendars: list[str] = field(default_factory=list)
    requests: int = 0


KNOWN = Known()


def _seed() -> None:
    """In each host: schedules of every kind (one paused), and a dead letter."""
    now = database_now()
    schedules = []
    for host in (HOST_A, HOST_B):
        common = {"topic": "reports", "event_type": "report.build", "host_id": host}
        made = [
            api.create_interval("every-minute", every=1, unit="MINUTES", **common),
            api.create_cron("nightly", cron="0 2 * * *", time_zone="Europe/Brussels", **common),
            api.create_once("later", at=now + timedelta(days=1), key="later", **common),
            api.create_interval(
                "paused", every=2, unit="HOURS", start=now - timedelta(days=1), **common
            ),
        ]
        api.pause("paused", reason="seed", host_id=host)
        for schedule in made[:2]:
            api.trigger(schedule)
        OutboxMessage.objects.filter(aggregate_id=made[0].pk).update(
            status=DeliveryStatus.DELIVERY_FAILED, attempts=10, last_error="seeded"
        )
        schedules += made
    KNOWN.schedules = [str(s.pk) for s in schedules]
    KNOWN.calendars = [
        str(api.create_calendar("ops", weekend=[6], host_id=host).pk) for host in (HOST_A, HOST_B)
    ]
    KNOWN.messages = [str(pk) for pk in OutboxMessage.objects.values_list("pk", flat=True)]


def _current_version(schedule_id: str) -> str | None:
    try:
        version = Schedule.objects.filter(pk=uuid.UUID(schedule_id)).values_list(
            "aggregate_version", flat=True
        )
        found = version.first()
    except ValueError:
        return None
    return None if found is None else f'"{found}"'


def _aim(case: Any, choice: tuple[int, bool]) -> Any:
    index, current = choice
    meta = getattr(case, "_meta", None)
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return case  # an invalid request stays as invalid as it was made
    params = case.path_parameters or {}
    if "id" in params and index >= 0:
        pool = KNOWN.messages if case.path.startswith("/outbox/") else KNOWN.schedules
        if case.path.startswith("/calendars/"):
            pool = KNOWN.calendars
        if pool:
            params["id"] = pool[index % len(pool)]
    if case.path == "/schedules/bulk-cancel/" and index >= 0 and KNOWN.schedules:
        # Aimed at schedules that exist (a random id names none: always a 400).
        case.body = {"ids": [KNOWN.schedules[index % len(KNOWN.schedules)]]}
    headers = case.headers
    if current and headers is not None and "If-Match" in headers and "id" in params:
        version = _current_version(str(params["id"]))
        if version is not None:
            headers["If-Match"] = version
    return case


@schema.hook
def flatmap_case(context: Any, case: Any) -> st.SearchStrategy[Any]:
    """Half the valid cases aim at things that exist, with their current version in If-Match."""
    return st.tuples(st.integers(min_value=-8, max_value=7), st.booleans()).map(
        lambda choice: _aim(case, choice)
    )


def refused_beyond_the_schema(case: Any, response: Any) -> bool:
    """Whether ``response`` refuses ``case`` for a rule the schema cannot state: a 400
    naming only such fields (:data:`BEYOND_THE_SCHEMA`), or a 412 (If-Match names a version
    that is no longer the current one: a state, as a 409 is)."""
    if response.status_code == 412:
        return True
    if response.status_code != 400:
        return False
    allowed = BEYOND_THE_SCHEMA.get((case.method.upper(), case.path), set())
    fields = set()
    for name in response.json().get("errors", {}):
        head, _dot, rest = name.partition(".")
        fields.add(rest if head.isdigit() and rest else head)
    return bool(fields) and fields <= allowed


@dataclass
class Fuzzed:
    """The API's address and a token of each user; whose turn it is to send a request."""

    base_url: str
    tokens: dict[str, str]
    sent: dict[str, int] = field(default_factory=dict)

    def next_user(self) -> str:
        name = list(USERS)[sum(self.sent.values()) % len(USERS)]
        self.sent[name] = self.sent.get(name, 0) + 1
        return name


@pytest.fixture
def fuzzed(transactional_db: None, settings: Any) -> Iterator[Fuzzed]:
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"
    # The project's WSGI application is called in this thread, on this test's connection, in
    # autocommit as in production: each request commits (or rolls back) its own work. The
    # request signals would close that connection after each request (CONN_MAX_AGE 0), as
    # Django's test client keeps them from doing.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        _seed()
        tokens = {}
        for name, codenames in USERS.items():
            if codenames is None:
                user = User.objects.create_superuser(name, f"{name}@example.com", "pw")
            else:
                user = User.objects.create_user(name, password="pw")
                user.user_permissions.set(
                    Permission.objects.filter(
                        content_type__app_label="dsched", codename__in=codenames
                    )
                )
            tokens[name] = Token.objects.create(user=user).key
        fuzzed = Fuzzed("http://testserver/api/dsched", tokens)
        yield fuzzed
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    print(f"{KNOWN.requests} requests: {fuzzed.sent}")
    # Every user sent some (an operation has more cases than users).
    assert set(fuzzed.sent) == set(USERS), fuzzed.sent
    KNOWN.schedules, KNOWN.messages, KNOWN.requests = [], [], 0


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    suppress_health_check=list(HealthCheck),
)
def test_every_endpoint_answers_as_documented_and_never_500(case: Any, fuzzed: Fuzzed) -> None:
    user = fuzzed.next_user()
    headers = {"Authorization": f"Token {fuzzed.tokens[user]}"}
    response = case.call(base_url=fuzzed.base_url, headers=headers)
    KNOWN.requests += 1
    # Every check schemathesis has; the acceptance of valid data as the docstring says.
    excluded = [positive_data_acceptance] if refused_beyond_the_schema(case, response) else []
    try:
        case.validate_response(
            response,
            excluded_checks=excluded,
            headers=headers,
            transport_kwargs={"base_url": fuzzed.base_url},
        )
    except Exception as failure:
        failure.add_note(f"sent as {user}")
        raise
    if case.method == "POST" and case.path == "/schedules/" and response.status_code == 201:
        KNOWN.schedules.append(response.json()["id"])
    if case.path == "/schedules/bulk/" and response.status_code == 201:
        KNOWN.schedules.extend(result["id"] for result in response.json()["results"])
