"""Tenant quotas in the admin: the schedule add form refuses a schedule past its host's
quota with the message; the quota pages need the model's permissions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_dsched.conf import app_settings
from django_dsched.models import Schedule, TenantQuota
from django_dsched.runtime.clock import database_now
from tests.admin.test_permissions import add_form
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

HOST = app_settings.DEFAULT_HOST_ID


def staff(client: Client, *codenames: str) -> User:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=codenames)
    )
    client.force_login(user)
    return user


def test_the_add_form_refuses_a_schedule_past_the_quota_with_the_message(admin_client):
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=1)
    ScheduleFactory(host_id=HOST)
    form = add_form(database_now() + timedelta(hours=1), misfire_policy="COALESCE")
    response = admin_client.post(reverse("admin:dsched_schedule_add"), form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert any(str(HOST) in e and "at most 1 live schedules" in e for e in errors), errors
    assert Schedule.objects.count() == 1
    TenantQuota.objects.filter(host_id=HOST).update(max_active_schedules=2)
    response = admin_client.post(reverse("admin:dsched_schedule_add"), form)
    assert response.status_code == 302
    assert Schedule.objects.count() == 2


def test_duplicating_past_the_quota_reports_it_and_copies_nothing(admin_client):
    TenantQuota.objects.create(host_id=HOST, max_active_schedules=1)
    source = ScheduleFactory(host_id=HOST)
    response = admin_client.post(
        reverse("admin:dsched_schedule_changelist"),
        {"action": "duplicate_selected", "_selected_action": [str(source.pk)]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any("at most 1 live schedules" in m for m in shown), shown
    assert Schedule.objects.count() == 1


def test_quotas_are_added_changed_and_deleted_with_the_models_permissions(client):
    staff(client, "view_tenantquota")
    add = reverse("admin:dsched_tenantquota_add")
    body = {"host_id": str(HOST), "max_active_schedules": "10", "max_fires_per_second": "2.5"}
    assert client.get(reverse("admin:dsched_tenantquota_changelist")).status_code == 200
    assert client.post(add, body).status_code == 403
    client.logout()
    User.objects.all().delete()
    staff(client, "view_tenantquota", "add_tenantquota", "change_tenantquota")
    assert client.post(add, body).status_code == 302
    quota = TenantQuota.objects.get()
    assert (quota.max_active_schedules, quota.max_fires_per_second) == (10, 2.5)
    assert quota.updated_ts is not None
    change = reverse("admin:dsched_tenantquota_change", args=[quota.pk])
    response = client.post(change, {"max_active_schedules": "", "max_fires_per_second": "0"})
    assert response.status_code == 200  # a rate must be positive
    assert (
        client.post(change, {"max_active_schedules": "", "max_fires_per_second": ""}).status_code
        == 302
    )
    assert TenantQuota.objects.get().max_active_schedules is None
    delete = reverse("admin:dsched_tenantquota_delete", args=[quota.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    client.logout()
    User.objects.all().delete()
    staff(client, "view_tenantquota", "delete_tenantquota")
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not TenantQuota.objects.exists()


def test_a_new_tenants_first_schedule_gives_it_the_default_quota_once_saved(admin_client, settings):
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = 0
    tenant = "aaaaaaaa-0000-0000-0000-000000000000"
    form = add_form(database_now() + timedelta(hours=1), misfire_policy="COALESCE")
    refused = admin_client.post(reverse("admin:dsched_schedule_add"), {**form, "host_id": tenant})
    errors = refused.context["adminform"].form.non_field_errors()
    assert any("at most 0 live schedules" in e for e in errors), errors
    assert not TenantQuota.objects.exists()  # the form checked; only a save writes the row
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = 1
    saved = admin_client.post(reverse("admin:dsched_schedule_add"), {**form, "host_id": tenant})
    assert saved.status_code == 302
    row = TenantQuota.objects.get()
    assert (str(row.host_id), row.max_active_schedules, row.max_fires_per_second) == (
        tenant,
        1,
        100.0,
    )
    again = admin_client.post(
        reverse("admin:dsched_schedule_add"), {**form, "host_id": tenant, "schedule_name": "x"}
    )
    errors = again.context["adminform"].form.non_field_errors()
    assert any("at most 1 live schedules" in e for e in errors), errors
    admin_client.post(reverse("admin:dsched_schedule_add"), {**form, "schedule_name": "mine"})
    assert TenantQuota.objects.count() == 1  # the operator's host gets none
    assert Schedule.objects.count() == 2
