"""``path("dsched/", include("django_dsched.metrics.urls"))`` serves ``dsched/metrics``."""

from __future__ import annotations

from django.urls import path

from django_dsched.metrics import views

app_name = "dsched_metrics"
urlpatterns = [path("metrics", views.metrics, name="metrics")]
