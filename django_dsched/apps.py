from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DschedConfig(AppConfig):
    name = "django_dsched"
    label = "dsched"
    verbose_name = _("Scheduler")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from django_dsched import checks  # noqa: F401  (registers the system checks)
        from django_dsched.declared import sync_after_migrate

        post_migrate.connect(sync_after_migrate, sender=self)

        from django_dsched.outbox.transports.tasks import connect_signals

        connect_signals()  # Django Tasks workers report runs of dsched messages
