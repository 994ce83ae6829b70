"""Tenant quotas: one row per host that needs limits other than the settings' defaults."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from django_dsched.admin import tenancy
from django_dsched.admin.base import ASSETS, ShownTimes
from django_dsched.admin.display import time_display
from django_dsched.admin.tenancy import TenantEdited
from django_dsched.changes import permissions as rules
from django_dsched.models import TenantQuota

# ModelForm is generic for the type checker only (django-stubs).
if TYPE_CHECKING:
    QuotaModelForm = forms.ModelForm[TenantQuota]
else:
    QuotaModelForm = forms.ModelForm


class QuotaForm(QuotaModelForm):
    """A quota's form: a new row's host is one the user may see (admin/tenancy.py)."""

    hosts: list[uuid.UUID] | None = None  # set per request; None: every host

    class Meta:
        model = TenantQuota
        fields = ["host_id", "max_active_schedules", "max_fires_per_second"]

    def clean_host_id(self) -> Any:
        return tenancy.allowed_host(self.hosts, self.cleaned_data.get("host_id"))


@admin.register(TenantQuota)
class TenantQuotaAdmin(TenantEdited, ShownTimes):
    """Add, change and delete need the model's permissions (the capabilities of
    :mod:`django_dsched.changes.permissions`). A change applies to the next create of the
    host, and to the scheduler's fires at its next heartbeat. A user limited to some
    tenants sees, adds and changes their rows only."""

    form = QuotaForm

    list_display = ["host_id", "max_active_schedules", "max_fires_per_second", "updated"]
    search_fields = ["host_id"]
    fields = ["host_id", "max_active_schedules", "max_fires_per_second"]
    updated = time_display(TenantQuota, "updated_ts")

    class Media:
        css = ASSETS["css"]
        js = ASSETS["js"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The host is the row's key: another host is another row.
        return ["host_id"] if obj is not None else []

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.VIEW_QUOTAS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.ADD_QUOTAS)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.CHANGE_QUOTAS)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.DELETE_QUOTAS)
