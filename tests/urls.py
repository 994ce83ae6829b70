from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/dsched/", include("django_dsched.rest.urls")),
    path("dsched/", include("django_dsched.metrics.urls")),
]
