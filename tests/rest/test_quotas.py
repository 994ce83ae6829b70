"""Creates past the host's quota of live schedules over REST: a 409 ``quota_exceeded``
naming the host and the limit, nothing written; the same request succeeds once there is
room."""

from __future__ import annotations

import pytest

from django_dsched.conf import app_settings
from django_dsched.models import Schedule, TenantQuota
from tests.rest.conftest import INTERVAL

pytestmark = pytest.mark.django_db

HOST = app_settings.DEFAULT_HOST_ID


def test_a_create_past_the_quota_is_a_409_naming_the_host_and_the_limit(root):
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=1)
    assert root.post("schedules/", {**INTERVAL, "name": "first"}).status_code == 201
    response = root.post("schedules/", {**INTERVAL, "name": "second"})
    assert response.status_code == 409, response.body
    assert response.body["code"] == "quota_exceeded"
    assert str(HOST) in response.body["detail"]
    assert "at most 1 live schedules" in response.body["detail"]
    assert Schedule.objects.count() == 1
    TenantQuota.objects.filter(host_id=HOST).update(max_active_schedules=2)
    assert root.post("schedules/", {**INTERVAL, "name": "second"}).status_code == 201


def test_a_bulk_create_past_the_quota_is_a_409_and_writes_nothing(root):
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=2)
    items = [{**INTERVAL, "name": f"item-{n}"} for n in range(3)]
    response = root.post("schedules/bulk/", items)
    assert response.status_code == 409, response.body
    assert response.body["code"] == "quota_exceeded"
    assert str(HOST) in response.body["detail"] and "at most 2" in response.body["detail"]
    assert Schedule.objects.count() == 0
    assert root.post("schedules/bulk/", items[:2]).status_code == 201
