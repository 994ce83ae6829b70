"""Creates past the host's quota of live schedules over REST: a 409 ``quota_exceeded``
naming the host and the limit, nothing written; the same request succeeds once there is
room. A new tenant (a host other than DSCHED_DEFAULT_HOST_ID) is given a quota by its first
create; the operator's own host is not."""

from __future__ import annotations

import pytest
from django.db import connection

from django_dsched import api
from django_dsched.conf import app_settings
from django_dsched.firing.throttle import read_rates
from django_dsched.models import Schedule, TenantQuota
from tests.rest.conftest import INTERVAL, APIClient, user_with
from tests.rest.hosts import HOST_A

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


# -- a new tenant's quota (DSCHED_TENANT_MAX_*) ------------------------------------------------
@pytest.fixture
def tenant(settings):
    """A client of host A (tests.rest.hosts) who may create and view."""
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"
    return APIClient(user_with(["add_schedule", "view_schedule"], name="alice-a"))


def rates() -> dict[str, float | None]:
    with connection.cursor() as cursor:
        return read_rates(cursor, app_settings.DEFAULT_MAX_FIRES_PER_SECOND)


def test_a_new_tenant_gets_the_default_quota_and_the_operators_host_none(tenant):
    for n in range(3):  # the operator's own host (DSCHED_DEFAULT_HOST_ID)
        api.create_interval(f"mine-{n}", every=1, topic="ops", event_type="ping")
    assert not TenantQuota.objects.exists()  # one host: nothing changes
    assert tenant.post("schedules/", {**INTERVAL, "name": "theirs"}).status_code == 201
    row = TenantQuota.objects.get()
    assert (row.host_id, row.max_active_schedules, row.max_fires_per_second) == (
        HOST_A,
        10_000,
        100.0,
    )
    assert rates() == {str(HOST_A): 100.0}  # what the scheduler reads, once per heartbeat


def test_a_new_tenants_quota_refuses_past_it_single_and_bulk(settings, tenant):
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = 2
    settings.DSCHED_TENANT_MAX_FIRES_PER_SECOND = 5.0
    items = [{**INTERVAL, "name": f"item-{n}"} for n in range(3)]
    refused = tenant.post("schedules/bulk/", items)
    assert (refused.status_code, refused.body["code"]) == (409, "quota_exceeded")
    assert "at most 2" in refused.body["detail"]
    assert not Schedule.objects.exists() and not TenantQuota.objects.exists()  # undone
    assert tenant.post("schedules/bulk/", items[:2]).status_code == 201
    single = tenant.post("schedules/", {**INTERVAL, "name": "third"})
    assert (single.status_code, single.body["code"]) == (409, "quota_exceeded")
    assert rates() == {str(HOST_A): 5.0}


def test_a_tenants_row_is_its_own_once_written(settings, tenant):
    assert tenant.post("schedules/", {**INTERVAL, "name": "first"}).status_code == 201
    TenantQuota.objects.filter(host_id=HOST_A).update(max_active_schedules=None)  # the operator
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = 1  # applies to new tenants only
    assert tenant.post("schedules/", {**INTERVAL, "name": "second"}).status_code == 201
    assert TenantQuota.objects.get().max_active_schedules is None


def test_without_tenant_limits_no_row_is_written(settings, tenant):
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = None
    settings.DSCHED_TENANT_MAX_FIRES_PER_SECOND = None
    assert tenant.post("schedules/", {**INTERVAL, "name": "first"}).status_code == 201
    assert not TenantQuota.objects.exists()
