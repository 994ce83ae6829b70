from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _


class EventRecord(models.Model):
    """Columns shared by events and outbox messages (the event-sourcing envelope). The payload
    and metadata are the event's alone: a message reads them by the shared id."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    host_id = models.UUIDField(_("host id"))
    aggregate_id = models.UUIDField(_("aggregate id"), help_text=_("The schedule's id."))
    aggregate_type = models.CharField(_("aggregate type"), max_length=64, default="Schedule")
    aggregate_version = models.BigIntegerField(_("aggregate version"))
    event_type = models.CharField(_("event type"), max_length=126)
    event_ts = models.DateTimeField(_("event time"))

    class Meta:
        abstract = True
