"""Cursor (keyset) pagination: pages that stay cheap and stable however long the list.

A page is the rows after the last one of the previous page in the list's order (a unique
tuple of columns, served by an index), never an offset. The cursor is opaque to clients:
base64 of the last row's key, checked field by field when it comes back, so a forged cursor
is a 400, never a bad query.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from django_dsched.models.validators import storable_text

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


class PageQuery(serializers.Serializer[Any]):
    cursor = serializers.CharField(required=False, max_length=2000)
    page_size = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE
    )


def _encode(values: Sequence[Any]) -> str:
    text = json.dumps([str(value) for value in values], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _bad_cursor() -> serializers.ValidationError:
    return serializers.ValidationError({"cursor": [_("This cursor is not valid.")]})


PAGE_PARAMETERS = ("cursor", "page_size")


def page_parameters(request: Request) -> dict[str, str]:
    return {k: str(v) for k, v in request.query_params.items() if k in PAGE_PARAMETERS}


def without_page_parameters(request: Request) -> dict[str, str]:
    """The query parameters a paginated list's own filters read."""
    return {k: str(v) for k, v in request.query_params.items() if k not in PAGE_PARAMETERS}


class KeysetPagination(BasePagination):
    """Pages of ``view.ordering`` (model field names, ``-`` for descending; unique together)."""

    def __init__(self) -> None:
        self.next_url: str | None = None

    def _decode(self, cursor: str, model: type[Model], ordering: Sequence[str]) -> list[Any]:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            texts = json.loads(raw.decode())
        except (binascii.Error, ValueError, RecursionError):
            raise _bad_cursor() from None
        if not (
            isinstance(texts, list)
            and len(texts) == len(ordering)
            and all(isinstance(t, str) and storable_text(t) for t in texts)
        ):
            raise _bad_cursor()
        values = []
        for name, text in zip(ordering, texts, strict=True):
            field = model._meta.get_field(name.lstrip("-"))
            try:
                value = field.to_python(text)  # type: ignore[union-attr]
            except (DjangoValidationError, ValueError, TypeError, OverflowError):
                raise _bad_cursor() from None
            if isinstance(value, datetime) and timezone.is_naive(value):
                raise _bad_cursor()
            values.append(value)
        return values

    @staticmethod
    def _after(ordering: Sequence[str], values: Sequence[Any]) -> Q:
        """Rows after ``values`` in ``ordering``: (a > x) or (a = x and b > y) or ..."""
        condition = Q()
        for index, name in enumerate(ordering):
            column = name.lstrip("-")
            step = Q(**{f"{column}__{'lt' if name.startswith('-') else 'gt'}": values[index]})
            for earlier, value in zip(ordering[:index], values[:index], strict=True):
                step &= Q(**{earlier.lstrip("-"): value})
            condition |= step
        return condition

    def paginate_queryset(  # type: ignore[override]  # querysets only
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any]:
        query = PageQuery(data=page_parameters(request))
        query.is_valid(raise_exception=True)
        size: int = query.validated_data["page_size"]
        ordering: Sequence[str] = view.ordering
        cursor = query.validated_data.get("cursor")
        queryset = queryset.order_by(*ordering)
        if cursor:
            queryset = queryset.filter(
                self._after(ordering, self._decode(cursor, queryset.model, ordering))
            )
        rows = list(queryset[: size + 1])
        page = rows[:size]
        self.next_url = None
        if len(rows) > size:
            last = page[-1]
            key = [getattr(last, name.lstrip("-")) for name in ordering]
            self.next_url = replace_query_param(
                request.build_absolute_uri(), "cursor", _encode(key)
            )
        return page

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"next": self.next_url, "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["next", "results"],
            "properties": {
                "next": {
                    "type": "string",
                    "format": "uri",
                    "nullable": True,
                    "description": "The next page (null on the last one).",
                },
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "cursor",
                "required": False,
                "in": "query",
                "description": "Where the page starts (from the previous page's next link).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 2000},
            },
            {
                "name": "page_size",
                "required": False,
                "in": "query",
                "description": f"Rows per page (default {DEFAULT_PAGE_SIZE}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
            },
        ]
