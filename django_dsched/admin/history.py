from __future__ import annotations

from django.contrib import admin

from ..models import Event, SchedulerLock
from .base import ReadOnlyAdmin


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["event_type", "aggregate_id", "aggregate_version", "scheduled_ts", "event_ts"]
    list_filter = ["event_type", "aggregate_type"]
    search_fields = ["=aggregate_id", "event_type"]
    date_hierarchy = None
    exclude = ["payload"]
    readonly_fields = ["payload_pretty"]


@admin.register(SchedulerLock)
class SchedulerLockAdmin(ReadOnlyAdmin):
    list_display = ["lock_id", "instance_id", "epoch", "last_heartbeat", "acquired_ts"]
