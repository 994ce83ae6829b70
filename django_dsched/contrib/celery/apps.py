from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DschedCeleryConfig(AppConfig):
    name = "django_dsched.contrib.celery"
    label = "dsched_celery"
    verbose_name = _("django-dsched for Celery workers")
    default_auto_field = "django.db.models.BigAutoField"
