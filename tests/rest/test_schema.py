"""The OpenAPI schema: generated without warnings, checked in, and served."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from django_dsched.rest.schema import as_yaml, generate

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REGENERATE = (
    "DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python -m django_dsched.rest.schema "
    "> docs/openapi.yaml"
)


@functools.cache
def checked_in() -> dict[str, Any]:
    """The checked-in schema, parsed once a run and shared: read it, never change it."""
    parsed: dict[str, Any] = yaml.load(CHECKED_IN.read_text(), Loader=yaml.CSafeLoader)
    return parsed


def test_the_checked_in_schema_is_the_generated_one():
    """A changed API without a changed schema fails here."""
    assert as_yaml(generate()) == CHECKED_IN.read_text(), f"regenerate it: {REGENERATE}"


def test_every_operation_documents_its_errors_in_the_one_shape():
    schema = checked_in()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"400", "401", "403"} <= set(responses), (method, path)  # 400: unknown
            # query parameters
            if "{id}" in path:
                assert "404" in responses, (method, path)
            if method in ("post", "put", "patch") and "requestBody" in operation:
                assert {"400", "413", "415"} <= set(responses), (method, path)
            for code, response in responses.items():
                if code.startswith("4"):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.rsplit("/", 1)[1] in ("Error", "PreconditionFailed")


@pytest.mark.django_db
def test_the_schema_is_served_under_the_api(client):
    response = client.get("/api/dsched/schema/")
    assert response.status_code == 200
    assert response.json() == checked_in()


def test_every_operation_has_its_own_summary_and_no_inherited_description():
    """drf-spectacular shows a view class's docstring as the description of each of its
    operations that has none: the base classes must not have one."""
    schema = checked_in()
    operations = [op for ops in schema["paths"].values() for op in ops.values()]
    summaries = [op["summary"] for op in operations]
    assert len(set(summaries)) == len(summaries) == len(operations)
    descriptions = [op["description"] for op in operations if "description" in op]
    assert len(set(descriptions)) == len(descriptions)


# RFC 3339 times (the schema's format: date-time), at the ends of the supported range.
TIMES = [
    f"{year}-{day}T{clock}{offset}"
    for year in ("0001", "1899", "1900", "1901", "2026", "8998", "8999", "9999")
    for day, clock in (("01-01", "00:00:00"), ("12-31", "23:59:59.999999"))
    for offset in ("Z", "+14:00", "-14:00", "+23:59", "-23:59")
]


def time_pattern() -> str:
    schema = checked_in()
    pattern: str = schema["components"]["schemas"]["RangeInputRequest"]["properties"]["start"][
        "pattern"
    ]
    return pattern


@pytest.mark.parametrize("text", TIMES)
def test_the_schema_and_the_server_agree_on_every_time(text):
    """A time the schema takes is one the server takes, whatever its offset, and one it
    refuses the server refuses (schemathesis: no "schema-valid request rejected")."""
    from django_dsched.rest.serializers.actions import RangeInput

    found = RangeInput(data={"start": text, "end": text})
    assert found.is_valid() is (re.search(time_pattern(), text) is not None), found.errors


@pytest.mark.parametrize("text", ["20260101T000000Z", "2026-W01-1T00:00:00Z", "99999-01-01"])
def test_times_the_schema_does_not_describe_are_refused(text):
    from django_dsched.rest.serializers.actions import RangeInput

    assert re.search(time_pattern(), text) is None
    assert not RangeInput(data={"start": text, "end": text}).is_valid()


def test_a_blank_cursor_is_refused_by_the_schema_too():
    schema = checked_in()
    cursor = next(
        p for p in schema["paths"]["/schedules/"]["get"]["parameters"] if p["name"] == "cursor"
    )
    assert cursor["schema"]["minLength"] == 1
