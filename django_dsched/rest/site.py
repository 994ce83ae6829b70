"""The API's own pages: its schema, and a JSON 404 for unknown paths under it."""

from __future__ import annotations

import functools
from typing import Any

from drf_spectacular.renderers import OpenApiJsonRenderer2
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched.rest.base import APIMixin, not_found
from django_dsched.rest.schema import generate


@functools.cache
def _served() -> dict[str, Any]:
    return generate()


class SchemaView(APIMixin):
    """``GET schema/``: this API's OpenAPI schema (public, like docs/openapi.yaml)."""

    permission_classes = [AllowAny]
    renderer_classes = [OpenApiJsonRenderer2]
    schema = None  # not part of the API's schema
    refuses_unknown_query = False

    def get_authenticators(self) -> list[Any]:
        return []

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(_served())


class UnknownPathView(APIMixin):
    """Any other path under the API's resources: a JSON 404 (not the site's HTML page)."""

    permission_classes = [AllowAny]
    schema = None  # not part of the API's schema
    refuses_unknown_query = False  # a 404 whatever the query

    get = post = put = patch = delete = not_found
