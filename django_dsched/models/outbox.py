from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from ..enums import DeliveryStatus, max_length_of
from .records import EventRecord


class OutboxMessage(EventRecord):
    """A fired event waiting to be delivered; its id is the event's id."""

    topic = models.CharField(_("topic"), max_length=126)
    status = models.CharField(
        _("status"),
        max_length=max_length_of(DeliveryStatus),
        choices=DeliveryStatus.choices,
        default=DeliveryStatus.PENDING,
    )

    class Meta:
        db_table = "outbox_message_t"
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        ordering = ["-event_ts"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=DeliveryStatus.values),
                name="dsched_outbox_status_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["event_ts"],
                condition=models.Q(status=DeliveryStatus.PENDING),
                name="dsched_outbox_pending_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic}: {self.event_type} ({self.status})"
