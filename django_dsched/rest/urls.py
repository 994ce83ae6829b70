"""Mount the API with ``path("api/dsched/", include("django_dsched.rest.urls"))``.

Paths are relative to where it is mounted (docs/openapi.yaml uses the same ones). Any
other path under ``schedules/``, ``outbox/``, ``cluster/`` or ``calendars/`` answers a JSON
404.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path, re_path
from rest_framework.routers import SimpleRouter

from django_dsched.rest.bulk import BulkCancelView, BulkCreateView
from django_dsched.rest.calendars import CalendarViewSet
from django_dsched.rest.cluster import ClusterView
from django_dsched.rest.outbox import OutboxViewSet
from django_dsched.rest.schedules import ScheduleViewSet
from django_dsched.rest.site import SchemaView, UnknownPathView

app_name = "dsched-api"

router = SimpleRouter()
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("outbox", OutboxViewSet, basename="outbox")
router.register("calendars", CalendarViewSet, basename="calendar")

urlpatterns: list[URLPattern | URLResolver] = [
    # Before the router's, whose schedules/<id>/ would take "bulk" for an id.
    path("schedules/bulk/", BulkCreateView.as_view(), name="schedule-bulk-create"),
    path("schedules/bulk-cancel/", BulkCancelView.as_view(), name="schedule-bulk-cancel"),
    *router.urls,
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("schema/", SchemaView.as_view(), name="schema"),
    re_path(r"^(?:schedules|outbox|cluster|calendars)(?:/.*)?$", UnknownPathView.as_view()),
]
