"""The OpenAPI schema: generated without warnings, checked in, and served."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from django_dsched.rest.schema import as_yaml, generate

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REGENERATE = (
    "DJANGO_SETTINGS_MODULE=tests.settings .venv/bin/python -m django_dsched.rest.schema "
    "> docs/openapi.yaml"
)


def test_the_checked_in_schema_is_the_generated_one():
    """A changed API without a changed schema fails here."""
    assert as_yaml(generate()) == CHECKED_IN.read_text(), f"regenerate it: {REGENERATE}"


def test_every_operation_documents_its_errors_in_the_one_shape():
    schema = yaml.safe_load(CHECKED_IN.read_text())
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"401", "403"} <= set(responses), (method, path)
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
    assert response.json() == yaml.safe_load(CHECKED_IN.read_text())


def test_every_operation_has_its_own_summary_and_no_inherited_description():
    """drf-spectacular shows a view class's docstring as the description of each of its
    operations that has none: the base classes must not have one."""
    schema = yaml.safe_load(CHECKED_IN.read_text())
    operations = [op for ops in schema["paths"].values() for op in ops.values()]
    summaries = [op["summary"] for op in operations]
    assert len(set(summaries)) == len(summaries) == len(operations)
    descriptions = [op["description"] for op in operations if "description" in op]
    assert len(set(descriptions)) == len(descriptions)
