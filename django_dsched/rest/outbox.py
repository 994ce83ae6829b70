"""``outbox/``: the messages fires produced, by status and topic; retry and discard dead
letters (:mod:`django_dsched.outbox.dead_letters`, as the admin's actions)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched.models import OutboxMessage
from django_dsched.outbox import dead_letters
from django_dsched.rest import permissions, tenancy
from django_dsched.rest.base import APIMixin, query
from django_dsched.rest.errors import StateConflict
from django_dsched.rest.pagination import KeysetPagination
from django_dsched.rest.responses import READ, READ_ONE, described, errors
from django_dsched.rest.serializers import (
    MessageDetailSerializer,
    MessageSerializer,
    OutboxQuery,
    TriggerInput,
)


class OutboxViewSet(APIMixin, viewsets.GenericViewSet[OutboxMessage]):
    permission_table = permissions.OUTBOX
    queryset = OutboxMessage.objects.all()
    serializer_class = MessageSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    lookup_value_regex = "[^/]+"
    ordering: tuple[str, ...] = ("-event_ts", "-id")

    def get_queryset(self) -> QuerySet[OutboxMessage]:
        return OutboxMessage.objects.filter(host_id__in=tenancy.hosts(self.request))

    def _selected(self) -> QuerySet[OutboxMessage]:
        try:
            pk = uuid.UUID(str(self.kwargs["id"]))
        except ValueError:
            raise NotFound() from None
        selected = self.get_queryset().filter(pk=pk)
        if not selected.exists():
            raise NotFound()
        return selected

    @described(
        summary="List outbox messages, newest first",
        parameters=[OutboxQuery],
        responses={200: MessageSerializer(many=True), **errors(400, *READ)},
    )
    def list(self, request: Request) -> Response:
        filters: dict[str, Any] = query(OutboxQuery, request, paginated=True)
        queryset = self.get_queryset().defer("payload", "metadata")
        for name, column in (
            ("status", "status"),
            ("topic", "topic"),
            ("schedule", "aggregate_id"),
        ):
            if name in filters:
                queryset = queryset.filter(**{column: filters[name]})
        paginator = KeysetPagination()
        rows = paginator.paginate_queryset(queryset, request, self)
        data = MessageSerializer(rows, many=True).data  # type: ignore[arg-type]
        return paginator.get_paginated_response(data)

    @described(
        summary="Read an outbox message, with its payload",
        responses={200: MessageDetailSerializer, **errors(*READ_ONE)},
    )
    def retrieve(self, request: Request, **kwargs: Any) -> Response:
        message = self._selected().get()
        return Response(MessageDetailSerializer(message).data)

    @described(
        summary="Retry a dead letter",
        description="It is PENDING again with a fresh set of attempts; relays pick it up at once.",
        request=TriggerInput,
        responses={200: MessageDetailSerializer, **errors(*READ_ONE, 400, 409, 413, 415)},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, **kwargs: Any) -> Response:
        TriggerInput(data=request.data).is_valid(raise_exception=True)
        selected = self._selected()
        if not dead_letters.retry(selected).changed:
            raise self._not_dead(selected)
        return Response(MessageDetailSerializer(selected.get()).data)

    @described(
        summary="Discard a dead letter",
        description="The message is deleted; its event stays (and ages out with retention).",
        request=TriggerInput,
        responses={
            204: OpenApiResponse(description="Discarded."),
            **errors(*READ_ONE, 400, 409, 413, 415),
        },
    )
    @action(detail=True, methods=["post"])
    def discard(self, request: Request, **kwargs: Any) -> Response:
        TriggerInput(data=request.data).is_valid(raise_exception=True)
        selected = self._selected()
        if not dead_letters.discard(selected).changed:
            raise self._not_dead(selected)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @staticmethod
    def _not_dead(selected: QuerySet[OutboxMessage]) -> StateConflict:
        message = selected.first()
        state = message.get_status_display() if message else _("gone")
        return StateConflict(
            _(
                "Only dead letters (delivery failed) can be retried or discarded; this "
                "message is %(status)s."
            )
            % {"status": state}
        )
