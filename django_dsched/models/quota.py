"""Quotas per tenant (``host_id``): the most schedules a host may have alive and the most
fires per second the scheduler gives it. A row overrides both settings defaults
(``DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES``, ``DSCHED_DEFAULT_MAX_FIRES_PER_SECOND``) for its
host; an empty field of a row means no limit for that host. Read by
:mod:`django_dsched.changes.quotas` (creates) and :mod:`django_dsched.firing.throttle`
(the fire path, once per heartbeat)."""

from __future__ import annotations

from typing import Any

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class TenantQuota(models.Model):
    host_id = models.UUIDField(
        _("host id"), primary_key=True, help_text=_("The tenant these limits apply to.")
    )
    max_active_schedules = models.IntegerField(
        _("most live schedules"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_(
            "Most schedules the host may have that can still fire (active, paused or set "
            "aside; completed and cancelled ones do not count). A create past it is refused. "
            "Empty: no limit."
        ),
    )
    max_fires_per_second = models.FloatField(
        _("most fires per second"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text=_(
            "Most fires per second the scheduler gives the host (over every instance); fires "
            "over it wait, none is dropped. Empty: no limit."
        ),
    )
    updated_ts = models.DateTimeField(_("updated"), db_default=Now(), editable=False)

    class Meta:
        db_table = "tenant_quota_t"
        verbose_name = _("tenant quota")
        verbose_name_plural = _("tenant quotas")
        ordering = ["host_id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_active_schedules__gte=0),
                name="dsched_quota_schedules_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(max_fires_per_second__gte=0.001),
                name="dsched_quota_rate_positive",
            ),
        ]

    def __str__(self) -> str:
        return str(self.host_id)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, stamping ``updated_ts`` with the database's clock."""
        self.updated_ts = Now()
        super().save(*args, **kwargs)
        self.refresh_from_db(fields=["updated_ts"])
