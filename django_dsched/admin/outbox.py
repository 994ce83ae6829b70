from __future__ import annotations

from django.contrib import admin

from ..models import OutboxMessage
from .base import ReadOnlyAdmin


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = ["topic", "event_type", "status", "aggregate_id", "event_ts"]
    list_filter = ["status", "topic"]
    search_fields = ["=id", "=aggregate_id", "topic", "event_type"]
    exclude = ["payload"]
    readonly_fields = ["payload_pretty"]
