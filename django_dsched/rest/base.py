"""What every view of the API shares: JSON in and out, the body limit, authentication,
permissions and the error shape, set here rather than taken from the project's
``REST_FRAMEWORK`` defaults (which would otherwise change this API with them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import transaction
from django.db.models import Model, QuerySet
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers, viewsets
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotFound
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.views import APIView

from django_dsched.changes.permissions import Capability
from django_dsched.conf import app_settings
from django_dsched.rest import auth, tenancy
from django_dsched.rest.errors import exception_handler
from django_dsched.rest.pagination import KeysetPagination, without_page_parameters
from django_dsched.rest.parsers import JSONBodyParser, body_limit, check_content_length
from django_dsched.rest.permissions import ActionPermission
from django_dsched.rest.serializers.actions import NoOptions
from django_dsched.rest.serializers.audience import Audience

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass

M = TypeVar("M", bound=Model)


class ASCIIJSONRenderer(JSONRenderer):
    """JSON with every non-ASCII character escaped: text that cannot be encoded (an echoed
    lone surrogate in an error message) still renders."""

    ensure_ascii = True
    charset = None  # application/json has no charset parameter


class APIMixin(APIView):
    # The base of every view (before DRF's viewset classes). No docstring: drf-spectacular
    # would show it as the description of every operation.

    renderer_classes: Sequence[type[BaseRenderer]] = [ASCIIJSONRenderer]
    parser_classes: Sequence[type[BaseParser]] = [JSONBodyParser]
    permission_classes: Sequence[_PermissionClass] = [ActionPermission]
    versioning_class = None
    metadata_class = None  # OPTIONS is not part of the API
    schema: ViewInspector | None = AutoSchema()
    # The model's field names -> the API's, for the validation errors of the services.
    field_names: Mapping[str, str] = {}
    permission_table: Mapping[str, Capability] = {}
    # The actions that read query parameters (each with its own strict serializer); every
    # other action takes none, and refuses any it is sent (400, as a list refuses an
    # unknown filter): a typo is never silently ignored.
    query_actions: frozenset[str] = frozenset()
    refuses_unknown_query: bool = True

    def audience(self) -> Audience:
        """Who this request's answer is for (what of the operator's side it shows), once
        per request."""
        found: Audience | None = getattr(self.request, "_dsched_audience", None)
        if found is None:
            found = Audience.of_user(self.request.user)
            self.request._dsched_audience = found  # type: ignore[attr-defined]
        return found

    def get_serializer_context(self) -> dict[str, Any]:
        return {"request": self.request, "view": self, "audience": self.audience()}

    def get_authenticators(self) -> list[BaseAuthentication]:
        return auth.authenticators()

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return exception_handler

    def max_body_bytes(self) -> int:
        """The largest body this view reads (a larger one is a 413)."""
        return app_settings.API_MAX_BODY_BYTES

    def check_size(self, request: Request) -> None:
        """Limits checked before authentication (and so before any query): the announced
        body length (the bulk endpoints count their items after authentication)."""
        check_content_length(request, body_limit(self))  # 413 before anything is read

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.check_size(request)
        super().initial(request, *args, **kwargs)  # authentication, permissions, throttles
        action = getattr(self, "action", None) or ""
        if self.refuses_unknown_query and action not in self.query_actions:
            query(NoOptions, request)


def query(
    serializer_class: type[serializers.Serializer[Any]],
    request: Request,
    *,
    paginated: bool = False,
) -> Any:
    """The validated query parameters (unknown ones are refused).

    A plain dict, not the QueryDict: "?state=" is then an empty value (refused, as the
    schema says), not a missing one.
    """
    params = without_page_parameters(request) if paginated else request.query_params.dict()
    found = serializer_class(data=params)
    found.is_valid(raise_exception=True)
    return found.validated_data


def body(serializer_class: type[serializers.Serializer[Any]], request: Request) -> Any:
    found = serializer_class(data=request.data)
    found.is_valid(raise_exception=True)
    return found.validated_data


def atomic() -> transaction.Atomic:
    return transaction.atomic(using=app_settings.DATABASE)


def not_found(*args: Any, **kwargs: Any) -> Any:
    raise NotFound()


class TenantViewSet(APIMixin, viewsets.GenericViewSet[M], Generic[M]):
    # A viewset over rows that carry a host_id: it sees the request's hosts only, and
    # answers a malformed id like a missing one (a JSON 404). (No docstring: see APIMixin.)

    queryset: QuerySet[M]
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    lookup_value_regex = "[^/]+"  # any text reaches the view, which parses it
    ordering: tuple[str, ...] = ()  # the list's order: unique, served by an index

    def get_queryset(self) -> QuerySet[M]:
        return self.queryset.filter(host_id__in=tenancy.hosts(self.request))

    def selected(self) -> QuerySet[M]:
        """The row the URL names, among the request's hosts (404 if there is none)."""
        try:
            pk = uuid.UUID(str(self.kwargs["id"]))
        except ValueError:
            raise NotFound() from None
        rows = self.get_queryset().filter(pk=pk)
        if not rows.exists():
            raise NotFound()
        return rows

    def page(
        self,
        queryset: QuerySet[Any],
        serializer: Callable[..., serializers.BaseSerializer[Any]],
        ordering: tuple[str, ...] | None = None,
    ) -> Response:
        """One page of ``queryset`` in ``ordering`` (default: the list's), serialized."""
        self.ordering = ordering or type(self).ordering
        paginator = KeysetPagination()
        rows = paginator.paginate_queryset(queryset, self.request, self)
        context = {"audience": self.audience()}
        return paginator.get_paginated_response(serializer(rows, many=True, context=context).data)
