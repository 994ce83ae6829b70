"""Who is calling: DRF's TokenAuthentication for services (when ``rest_framework.authtoken``
is installed) and Django's session with CSRF for browsers; or DSCHED_API_AUTHENTICATION_CLASSES.
"""

from __future__ import annotations

from django.apps import apps
from django.utils.module_loading import import_string
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
)

from django_dsched.conf import app_settings


def authentication_classes() -> list[type[BaseAuthentication]]:
    paths = app_settings.API_AUTHENTICATION_CLASSES
    if paths is not None:
        return [import_string(path) for path in paths]
    # The token first: an anonymous caller is then told how to authenticate (401 with
    # WWW-Authenticate: Token) instead of a bare 403.
    found: list[type[BaseAuthentication]] = []
    if apps.is_installed("rest_framework.authtoken"):
        found.append(TokenAuthentication)
    found.append(SessionAuthentication)
    return found


def authenticators() -> list[BaseAuthentication]:
    return [cls() for cls in authentication_classes()]
