"""Read-only history: events (fires and changes) and the leader's lease."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_dsched.admin.base import ReadOnlyAdmin, pretty_json
from django_dsched.admin.display import EMPTY
from django_dsched.models import Event, Lease
from django_dsched.schedules.audit import PREFIX

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class EventKindFilter(admin.SimpleListFilter):
    """Fires or changes, without a DISTINCT over the whole event table."""

    title = _("kind")
    parameter_name = "kind"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, StrOrPromise]]:
        return [
            ("fire", _("fires (all)")),
            ("manual", _("fires: run now")),
            ("backfill", _("fires: backfill")),
            ("change", _("changes (audit)")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Event]) -> QuerySet[Event]:
        value = self.value()
        if value == "fire":
            return queryset.filter(scheduled_ts__isnull=False)
        if value in ("manual", "backfill"):
            return queryset.filter(scheduled_ts__isnull=False, metadata__trigger=value)
        if value == "change":
            return queryset.filter(scheduled_ts__isnull=True, event_type__startswith=PREFIX)
        return queryset


EVENT_FIELDS = (
    "id",
    "event_type",
    "schedule_link",
    "aggregate_version",
    "scheduled_ts",
    "event_ts",
    "leader_epoch",
    "host_id",
    "metadata_pretty",
    "payload_pretty",
)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = [
        "event_type",
        "schedule_link",
        "aggregate_version",
        "scheduled_ts",
        "event_ts",
        "actor",
    ]
    list_filter = [EventKindFilter]
    search_fields = ["=aggregate_id", "=id", "event_type"]
    fields = readonly_fields = EVENT_FIELDS

    @admin.display(description=_("schedule"))
    def schedule_link(self, obj: Event) -> str:
        name = (obj.metadata or {}).get("schedule_name") or str(obj.aggregate_id)
        url = reverse("admin:dsched_schedule_change", args=[obj.aggregate_id])
        return format_html('<a href="{}">{}</a>', url, name)

    @admin.display(description=_("by"))
    def actor(self, obj: Event) -> str:
        metadata = obj.metadata or {}
        return metadata.get("actor") or metadata.get("instance_id") or EMPTY

    @admin.display(description=_("payload"))
    def payload_pretty(self, obj: Event) -> str:
        return format_html('<pre class="dsched-json">{}</pre>', pretty_json(obj.payload))

    @admin.display(description=_("metadata"))
    def metadata_pretty(self, obj: Event) -> str:
        return format_html('<pre class="dsched-json">{}</pre>', pretty_json(obj.metadata))


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ["lease_id", "instance_id", "epoch", "last_heartbeat", "acquired_ts"]
