"""``outbox/``: the messages fires produced, by status and topic; retry and discard dead
letters (:mod:`django_dsched.outbox.dead_letters`, as the admin's actions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched.counts import ChangeCount
from django_dsched.models import OutboxMessage
from django_dsched.outbox import dead_letters
from django_dsched.rest import permissions
from django_dsched.rest.base import TenantViewSet, body, query
from django_dsched.rest.errors import StateConflict
from django_dsched.rest.responses import READ, READ_ONE, described, errors
from django_dsched.rest.serializers.actions import NoOptions
from django_dsched.rest.serializers.messages import MessageDetailSerializer, MessageSerializer
from django_dsched.rest.serializers.queries import OutboxQuery


class OutboxViewSet(TenantViewSet[OutboxMessage]):
    permission_table = permissions.OUTBOX
    query_actions = frozenset({"list"})
    queryset = OutboxMessage.objects.all()
    serializer_class = MessageSerializer
    # Newest first: ids are time-ordered, so the primary key serves the order (and a filter
    # on pending messages the partial index on their ids).
    ordering = ("-id",)

    @described(
        summary="List outbox messages, newest first",
        parameters=[OutboxQuery],
        responses={200: MessageSerializer(many=True), **errors(400, *READ)},
    )
    def list(self, request: Request) -> Response:
        filters: dict[str, Any] = query(OutboxQuery, request, paginated=True)
        queryset = self.get_queryset()
        for name, column in (
            ("status", "status"),
            ("topic", "topic"),
            ("schedule", "aggregate_id"),
        ):
            if name in filters:
                queryset = queryset.filter(**{column: filters[name]})
        return self.page(queryset, MessageSerializer)

    @described(
        summary="Read an outbox message, with its payload",
        responses={200: MessageDetailSerializer, **errors(*READ_ONE)},
    )
    def retrieve(self, request: Request, **kwargs: Any) -> Response:
        return Response(self.shown(self.selected().get()))

    @described(
        summary="Retry a dead letter",
        description="It is PENDING again with a fresh set of attempts; relays pick it up at once.",
        request=NoOptions,
        responses={200: MessageDetailSerializer, **errors(*READ_ONE, 400, 409, 413, 415)},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, **kwargs: Any) -> Response:
        message = self._dead_letter(request, dead_letters.retry).first()
        if message is None:  # discarded meanwhile
            raise NotFound()
        return Response(self.shown(message))

    @described(
        summary="Discard a dead letter",
        description="The message is deleted; its event stays (and ages out with retention).",
        request=NoOptions,
        responses={
            204: OpenApiResponse(description="Discarded."),
            **errors(*READ_ONE, 400, 409, 413, 415),
        },
    )
    @action(detail=True, methods=["post"])
    def discard(self, request: Request, **kwargs: Any) -> Response:
        self._dead_letter(request, dead_letters.discard)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def shown(self, message: OutboxMessage) -> Any:
        """``message`` with its payload, as this caller may see it."""
        return MessageDetailSerializer(message, context=self.get_serializer_context()).data

    def _dead_letter(
        self, request: Request, handle: Callable[[QuerySet[OutboxMessage]], ChangeCount]
    ) -> QuerySet[OutboxMessage]:
        """``handle`` the message the URL names; 409 if it is not a dead letter."""
        body(NoOptions, request)
        selected = self.selected()
        if not handle(selected).changed:
            message = selected.first()
            raise StateConflict(
                _(
                    "Only dead letters (delivery failed) can be retried or discarded; this "
                    "message is %(status)s."
                )
                % {"status": message.get_status_display() if message else _("gone")}
            )
        return selected
