"""Staff limited to tenants: which hosts (``host_id``) a staff user sees in the admin.

``DSCHED_ADMIN_HOST_RESOLVER`` names a ``callable(request) -> iterable of host ids, or
None`` (None: every host, the default when the setting is unset). Every page of the dsched
admin that shows or changes a tenant's rows goes through :class:`TenantScoped`: its lists,
searches and filters, its change pages (another host's row is "does not exist", as a
missing one), its actions (the selection is taken from the scoped list, so ids posted by
hand for another host's rows select nothing), and its forms (a host the user may not see
is refused). The cluster page is cluster-wide and needs the cluster's permission.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, TypeVar

from django import forms
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _

from django_dsched.admin.base import AnyModelAdmin, unstorable_query
from django_dsched.changes.permissions import reachable_hosts
from django_dsched.conf import app_settings

M = TypeVar("M", bound=Model)

NOT_YOURS = _("You may not use this host: it is not one of the tenants you support.")


def hosts(request: HttpRequest) -> list[uuid.UUID] | None:
    """The hosts ``request``'s user may see (resolved once per request), or None: all."""
    if hasattr(request, "_dsched_admin_hosts"):
        cached: list[uuid.UUID] | None = request._dsched_admin_hosts
        return cached
    found: list[uuid.UUID] | None = None
    path = app_settings.ADMIN_HOST_RESOLVER
    if path is not None:
        values: Iterable[uuid.UUID | str] | None = import_string(path)(request)
        if values is not None:
            found = reachable_hosts(values, "DSCHED_ADMIN_HOST_RESOLVER")
    request._dsched_admin_hosts = found  # type: ignore[attr-defined]
    return found


def scoped(request: HttpRequest, queryset: QuerySet[M], field: str = "host_id") -> QuerySet[M]:
    """``queryset`` limited to the hosts ``request``'s user may see."""
    allowed = hosts(request)
    return queryset if allowed is None else queryset.filter(**{f"{field}__in": allowed})


def allowed_host(hosts: list[uuid.UUID] | None, host: Any) -> Any:
    """A form's ``host``, if ``hosts`` (a user's, None: every host) has it; else the form's
    error: a row is created in, or moved to, one of the user's hosts only."""
    if hosts is not None and host not in hosts:
        raise forms.ValidationError(NOT_YOURS, code="host_not_allowed")
    return host


class TenantScoped(AnyModelAdmin):
    """A model admin over rows that carry a ``host_id``: it sees the user's hosts only."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(request, super().get_queryset(request))


class TenantEdited(TenantScoped):
    """A tenant-scoped admin whose rows staff edit: its form knows the user's hosts (a row
    is saved in one of them only), and a list query the database cannot store is refused."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"hosts": hosts(request)})

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        refused = unstorable_query(request)
        if refused is not None:
            return refused
        return super().changelist_view(request, extra_context)
