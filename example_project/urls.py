from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/dsched/", include("django_dsched.rest.urls")),
    path("", RedirectView.as_view(url="/admin/")),
]
