"""The REST API in the URLconf without the apps it needs (dsched.E015, W004)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.urls import URLResolver, get_resolver


def _serves_rest(patterns: Any) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            name = pattern.urlconf_name
            if getattr(name, "__name__", name) == "django_dsched.rest.urls":
                return True
            if _serves_rest(pattern.url_patterns):
                return True
    return False


@register(Tags.urls)
def check_rest_apps(**kwargs: Any) -> list[CheckMessage]:
    """The URLconf includes the REST API (django_dsched.rest.urls) but the apps it needs are
    not installed (dsched.E015, dsched.W004)."""
    try:
        served = _serves_rest(get_resolver().url_patterns)
    except Exception:  # a broken URLconf is Django's own check to report
        return []
    if not served:
        return []
    messages: list[CheckMessage] = []
    if not apps.is_installed("rest_framework"):
        messages.append(
            Error(
                "The URLconf includes django_dsched.rest.urls, but rest_framework is not in "
                "INSTALLED_APPS.",
                hint='Add "rest_framework" (and "rest_framework.authtoken" for API tokens) '
                "to INSTALLED_APPS (docs/api.md).",
                id="dsched.E015",
            )
        )
    if not apps.is_installed("rest_framework.authtoken"):
        messages.append(
            Warning(
                "The URLconf includes django_dsched.rest.urls, but rest_framework.authtoken "
                "is not in INSTALLED_APPS: services cannot use API tokens, and a request "
                "without credentials is answered 403, not 401.",
                hint='Add "rest_framework.authtoken" to INSTALLED_APPS and migrate, or '
                "ignore this warning if only logged-in browser sessions use the API "
                "(SILENCED_SYSTEM_CHECKS).",
                id="dsched.W004",
            )
        )
    return messages
