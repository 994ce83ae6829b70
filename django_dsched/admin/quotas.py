"""Tenant quotas: one row per host that needs limits other than the settings' defaults."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from django_dsched.admin.base import ASSETS, ShownTimes, unstorable_query
from django_dsched.admin.display import time_display
from django_dsched.changes import permissions as rules
from django_dsched.models import TenantQuota


@admin.register(TenantQuota)
class TenantQuotaAdmin(ShownTimes):
    """Add, change and delete need the model's permissions (the capabilities of
    :mod:`django_dsched.changes.permissions`). A change applies to the next create of the
    host, and to the scheduler's fires at its next heartbeat."""

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

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        refused = unstorable_query(request)
        if refused is not None:
            return refused
        return super().changelist_view(request, extra_context)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.VIEW_QUOTAS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.ADD_QUOTAS)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.CHANGE_QUOTAS)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.DELETE_QUOTAS)
