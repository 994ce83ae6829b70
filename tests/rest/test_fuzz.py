"""Property-based fuzzing of every endpoint, from the checked-in schema (docs/openapi.yaml),
against the live test server on real PostgreSQL (schemathesis + Hypothesis).

Each operation gets ``FUZZ_EXAMPLES`` generated requests (valid and invalid), as a
superuser with a token, about half of them aimed at schedules and messages that exist and
sent with their current version in If-Match (and bulk cancels aimed at them), so the
fuzzing reaches the code behind the 404, the 412 and a bulk cancel's success. Every
response must be a non-5xx that the schema documents (status code, content type, headers,
body).
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
from django.contrib.auth.models import User
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
# Generated requests per operation (more with FUZZ_EXAMPLES=...); the same ones on every
# run unless FUZZ_RANDOM=1 (then new ones each time: for hunting, not for CI).
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
RANDOM = os.environ.get("FUZZ_RANDOM") == "1"

schema = schemathesis.openapi.from_path(str(SCHEMA_PATH))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@dataclass
class Known:
    """What exists in the database now (the fuzz run adds what it creates)."""

    schedules: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    requests: int = 0


KNOWN = Known()


def _seed() -> None:
    now = database_now()
    common = {"topic": "reports", "event_type": "report.build"}
    schedules = [
        api.create_interval("every-minute", every=1, unit="MINUTES", **common),
        api.create_cron("nightly", cron="0 2 * * *", time_zone="Europe/Brussels", **common),
        api.create_once("later", at=now + timedelta(days=1), **common),
        api.create_interval(
            "paused", every=2, unit="HOURS", start=now - timedelta(days=1), **common
        ),
    ]
    api.pause("paused", reason="seed")
    for schedule in schedules[:2]:
        api.trigger(schedule)
    OutboxMessage.objects.filter(aggregate_id=schedules[0].pk).update(
        status=DeliveryStatus.DELIVERY_FAILED, attempts=10, last_error="seeded"
    )
    KNOWN.schedules = [str(s.pk) for s in schedules]
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


@pytest.fixture
def fuzzed(live_server: Any, transactional_db: None) -> Iterator[dict[str, str]]:
    _seed()
    user = User.objects.create_superuser("fuzz", "fuzz@example.com", "pw")
    token = Token.objects.create(user=user)
    yield {"base_url": f"{live_server.url}/api/dsched", "token": token.key}
    print(f"{KNOWN.requests} requests")
    KNOWN.schedules, KNOWN.messages, KNOWN.requests = [], [], 0


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    suppress_health_check=list(HealthCheck),
)
def test_every_endpoint_answers_as_documented_and_never_500(
    case: Any, fuzzed: dict[str, str]
) -> None:
    response = case.call(
        base_url=fuzzed["base_url"],
        headers={"Authorization": f"Token {fuzzed['token']}", "Connection": "close"},
    )
    KNOWN.requests += 1
    case.validate_response(response, checks=CHECKS)
    if case.method == "POST" and case.path == "/schedules/" and response.status_code == 201:
        KNOWN.schedules.append(response.json()["id"])
    if case.path == "/schedules/bulk/" and response.status_code == 201:
        KNOWN.schedules.extend(result["id"] for result in response.json()["results"])
