"""Every endpoint refuses a query parameter it does not know (400, the one error shape),
before it reads or writes anything: a typo is never silently ignored."""

from __future__ import annotations

import pytest

from django_dsched.models import Schedule
from tests.rest.test_permissions import ENDPOINTS, body_of, client_for, made, snapshot, world

pytestmark = pytest.mark.django_db

__all__ = ["client_for", "made", "world"]  # fixtures (made: this module's own, once)


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_an_unknown_query_parameter_is_refused(name, world, client_for):
    endpoint = ENDPOINTS[name]
    path = endpoint.path.format(**world)
    path += ("&" if "?" in path else "?") + "colour=red"
    before = snapshot()
    response = client_for("superuser").request(
        endpoint.method, path, body_of(endpoint, world), **endpoint.headers
    )
    assert response.status_code == 400, response.body
    assert response.body == {
        "status": 400,
        "code": "invalid",
        "detail": "Some fields are invalid.",
        "errors": {"colour": ["This field does not exist."]},
    }
    assert snapshot() == before


def test_a_create_with_an_unknown_parameter_neither_creates_nor_fires(world, client_for):
    """The issue's own case: POST schedules/?colour=red answered 201 and fired."""
    from tests.rest.conftest import INTERVAL

    client = client_for("superuser")
    response = client.post("schedules/?colour=red", {**INTERVAL, "name": "red"})
    assert response.status_code == 400
    assert not Schedule.objects.filter(schedule_name="red").exists()


def test_the_schema_and_unknown_paths_are_left_alone(world, client_for):
    client = client_for("superuser")
    assert client.get("schema/?colour=red").status_code == 200
    assert client.get("schedules/x/y/?colour=red").status_code == 404
