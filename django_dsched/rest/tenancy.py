"""Which tenants (``host_id``) a request may reach.

``DSCHED_API_HOST_RESOLVER`` names a ``callable(request) -> iterable of host ids`` (UUIDs
or their text); the request is DRF's, so ``request.user`` is the authenticated user
whatever the scheme. Every query of the API is filtered to these hosts: another host's
schedule is "not found", exactly like one that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.utils.module_loading import import_string
from rest_framework.request import Request

from django_dsched.changes.permissions import reachable_hosts
from django_dsched.conf import app_settings
from django_dsched.models.schedule import resolve_host


def default_hosts(request: Request) -> list[uuid.UUID]:
    """The default resolver: every request reaches DSCHED_DEFAULT_HOST_ID, and only it."""
    return [resolve_host(None)]


def hosts(request: Request) -> list[uuid.UUID]:
    """The hosts ``request`` may reach (resolved once per request), first the default one."""
    cached: list[uuid.UUID] | None = getattr(request, "_dsched_hosts", None)
    if cached is not None:
        return cached
    resolver = import_string(app_settings.API_HOST_RESOLVER)
    values: Iterable[uuid.UUID | str] = resolver(request)
    found = reachable_hosts(values, "DSCHED_API_HOST_RESOLVER")
    request._dsched_hosts = found  # type: ignore[attr-defined]
    return found
