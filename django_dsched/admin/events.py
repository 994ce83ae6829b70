"""Read-only history: events (fires and changes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_dsched.admin.base import ReadOnlyAdmin, pretty_json
from django_dsched.admin.display import EMPTY, time_display
from django_dsched.admin.tenancy import TenantScoped
from django_dsched.changes.audit import PREFIX
from django_dsched.models import Event

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
    "version",
    "slot",
    "written",
    "leader_epoch",
    "host_id",
    "metadata_pretty",
    "payload_pretty",
)


@admin.register(Event)
class EventAdmin(TenantScoped, ReadOnlyAdmin):
    list_display = ["event_type", "schedule_link", "version", "slot", "written", "actor"]
    list_filter = [EventKindFilter]
    search_fields = ["=aggregate_id", "=id", "event_type"]
    fields = readonly_fields = EVENT_FIELDS
    # Times as every dsched page writes them (the schedule page's panels name them alike).
    slot = time_display(Event, "scheduled_ts", description=_("slot"))
    written = time_display(Event, "event_ts", description=_("written"))
    # Sorted by id, which is time-ordered (no index on the time: history/event_ids.py).
    written.admin_order_field = "id"  # type: ignore[attr-defined]

    @admin.display(description=_("version"), ordering="aggregate_version")
    def version(self, obj: Event) -> int:
        return obj.aggregate_version

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
