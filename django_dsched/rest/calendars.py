"""``calendars/``: business calendars (holidays, weekend days, blackout windows) that
schedules name in ``calendars``; list, create, read, replace, change and delete them.

A request sees the calendars of the hosts it reaches (DSCHED_API_HOST_RESOLVER) and the
operator's (DSCHED_DEFAULT_HOST_ID's), which every tenant's schedules may use; it changes
only its hosts' own. A change reaches every schedule using the calendar at its next plan
(no schedule is written); a calendar a live schedule uses cannot be deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError
from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers as drf_serializers
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from django_dsched.changes import calendars as service
from django_dsched.conf import app_settings
from django_dsched.exceptions import ValidationError as DschedValidationError
from django_dsched.models import Calendar, CalendarWindow
from django_dsched.rest import permissions, tenancy
from django_dsched.rest.base import TenantViewSet, atomic, body, query
from django_dsched.rest.errors import StateConflict, race_lost, validation_failed
from django_dsched.rest.responses import READ, READ_ONE, WRITE, WRITE_ONE, described, errors
from django_dsched.rest.serializers.actions import NoOptions
from django_dsched.rest.serializers.calendars import (
    CalendarInputSerializer,
    CalendarSerializer,
)

# The API's name of each field -> the model's (for the model's validation errors).
FIELDS: Mapping[str, str] = {
    "name": "name",
    "country": "country",
    "subdivision": "subdivision",
    "first_year": "first_year",
    "last_year": "last_year",
    "added_dates": "added_dates",
    "removed_dates": "removed_dates",
    "weekend_days": "weekend_days",
}
API_NAMES: Mapping[str, str] = {
    **{model: api for api, model in FIELDS.items()},
    "start_ts": "windows",
    "end_ts": "windows",
    "start_day": "windows",
    "start_time": "windows",
    "end_day": "windows",
    "end_time": "windows",
    "time_zone": "windows",
    "label": "windows",
    "kind": "windows",
}
SHARED = _("The operator's calendars are shared with every tenant, read-only.")


class CalendarViewSet(TenantViewSet[Calendar]):
    permission_table = permissions.CALENDARS
    query_actions = frozenset({"list"})
    field_names = API_NAMES
    queryset = Calendar.objects.all()
    serializer_class = CalendarSerializer
    # Unique together (host_id, name), and served by that index.
    ordering = ("name", "host_id")

    def get_queryset(self) -> QuerySet[Calendar]:
        hosts = [*tenancy.hosts(self.request), app_settings.DEFAULT_HOST_ID]
        return self.queryset.filter(host_id__in=hosts).prefetch_related("windows")

    def shown(self, calendar: Calendar, code: int = status.HTTP_200_OK) -> Response:
        calendar = self.get_queryset().get(pk=calendar.pk)
        return Response(CalendarSerializer(calendar).data, status=code)

    def _own(self, calendar: Calendar) -> Calendar:
        """``calendar``, if this request may change it (its host is one the request
        reaches); the operator's are read-only to tenants."""
        if calendar.host_id not in tenancy.hosts(self.request):
            raise PermissionDenied(SHARED)
        return calendar

    @described(
        summary="List calendars (the request's hosts' and the operator's, shared)",
        responses={200: CalendarSerializer(many=True), **errors(400, *READ)},
    )
    def list(self, request: Request) -> Response:
        query(NoOptions, request, paginated=True)  # no filter: one page at a time
        return self.page(self.get_queryset(), CalendarSerializer)

    @described(
        summary="Create a calendar",
        request=CalendarInputSerializer,
        responses={201: CalendarSerializer, **errors(*WRITE, 409)},
    )
    def create(self, request: Request) -> Response:
        values = body(CalendarInputSerializer, request)
        allowed = tenancy.hosts(request)
        host = values.pop("host_id", allowed[0] if allowed else None)
        if host is None or host not in allowed:
            raise drf_serializers.ValidationError({"host_id": [_("You may not use this host.")]})
        windows = values.pop("windows", [])
        calendar = Calendar(host_id=host, **values)
        self._save(calendar, windows)
        return self.shown(calendar, status.HTTP_201_CREATED)

    @described(
        summary="Read a calendar, with its holidays and windows",
        responses={200: CalendarSerializer, **errors(*READ_ONE)},
    )
    def retrieve(self, request: Request, **kwargs: Any) -> Response:
        return self.shown(self.selected().get())

    @described(
        summary="Replace a calendar's definition",
        description=(
            "Fields left out take their defaults (no holidays, no dates, Saturday and "
            "Sunday, no windows). Every schedule using it plans with it from its next plan."
        ),
        request=CalendarInputSerializer,
        responses={200: CalendarSerializer, **errors(*WRITE_ONE, 409)},
    )
    def update(self, request: Request, **kwargs: Any) -> Response:
        return self._edit(request, partial=False)

    @described(
        summary="Change some fields of a calendar",
        description="As PUT, for the fields sent only (`windows` replaces them all).",
        request=CalendarInputSerializer,
        responses={200: CalendarSerializer, **errors(*WRITE_ONE, 409)},
    )
    def partial_update(self, request: Request, **kwargs: Any) -> Response:
        return self._edit(request, partial=True)

    @described(
        summary="Delete a calendar",
        description="Refused (409) while a live schedule uses it: take it off them first.",
        responses={204: OpenApiResponse(description="Deleted."), **errors(*READ_ONE, 409)},
    )
    def destroy(self, request: Request, **kwargs: Any) -> Response:
        calendar = self._own(self.selected().get())
        try:
            service.delete_calendar(calendar, actor=request.user)
        except DschedValidationError as exc:
            raise StateConflict("; ".join(exc.messages)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _edit(self, request: Request, *, partial: bool) -> Response:
        calendar = self._own(self.selected().get())
        found = CalendarInputSerializer(data=request.data, partial=partial)
        found.is_valid(raise_exception=True)
        values = dict(found.validated_data)
        if "host_id" in values and values.pop("host_id") != calendar.host_id:
            raise drf_serializers.ValidationError(
                {"host_id": [_("A calendar cannot move to another host.")]}
            )
        windows = values.pop("windows", None)
        if not partial:
            blank = Calendar()
            values = {name: getattr(blank, name) for name in FIELDS} | values
            windows = windows or []
        for name, value in values.items():
            setattr(calendar, name, value)
        self._save(calendar, windows)
        return self.shown(calendar)

    def _save(self, calendar: Calendar, windows: Sequence[dict[str, Any]] | None) -> None:
        made = None if windows is None else [CalendarWindow(**fields) for fields in windows]
        try:
            with atomic():
                service.save_calendar(calendar, made)
        except DschedValidationError as exc:
            raise validation_failed(exc, API_NAMES) from None
        except IntegrityError:
            raise race_lost() from None
