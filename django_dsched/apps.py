from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class DschedConfig(AppConfig):
    name = "django_dsched"
    label = "dsched"
    verbose_name = _("Scheduler")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: each of these imports the models, which can only be
        # loaded once the app registry is (start-up order).
        from django_dsched import checks  # noqa: F401  (registers the system checks)
        from django_dsched.declared import sync_after_migrate
        from django_dsched.outbox.transports.tasks import connect_signals

        post_migrate.connect(sync_after_migrate, sender=self)
        connect_signals()  # Django Tasks workers report runs of dsched messages
