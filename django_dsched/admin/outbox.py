from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_dsched.admin.base import ReadOnlyAdmin, pretty_json
from django_dsched.admin.display import duration, run_badge, run_duration
from django_dsched.admin.filters import OutboxTopicFilter
from django_dsched.changes import ChangeCount
from django_dsched.models import OutboxMessage
from django_dsched.outbox import dead_letters, runs

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


OUTBOX_FIELDS = (
    "id",
    "topic",
    "event_type",
    "status",
    "run_status_badge",
    "picked_ts",
    "started_ts",
    "completed_ts",
    "failed_ts",
    "queue_wait_display",
    "run_time_display",
    "priority",
    "attempts",
    "next_attempt_ts",
    "delivered_ts",
    "last_error_pretty",
    "claimed_by",
    "claimed_until",
    "aggregate_id",
    "aggregate_version",
    "host_id",
    "event_ts",
    "payload_pretty",
)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = [
        "topic",
        "event_type",
        "status",
        "run_status_badge",
        "attempts",
        "next_attempt_ts",
        "delivered_ts",
        "queue_wait_display",
        "run_time_display",
        "event_ts",
    ]
    list_filter = ["status", ("topic", OutboxTopicFilter)]
    search_fields = ["=id", "=aggregate_id", "topic", "event_type"]
    fields = readonly_fields = OUTBOX_FIELDS
    actions = ["retry_selected", "discard_selected"]

    # -- the run: derived status and durations (outbox.runs) ------------------------------
    @admin.display(description=_("run"))
    def run_status_badge(self, obj: OutboxMessage) -> SafeString:
        return run_badge(obj)

    @admin.display(description=_("queue wait"))
    def queue_wait_display(self, obj: OutboxMessage) -> str:
        return duration(runs.queue_wait(obj.event_ts, obj.picked_ts))

    @admin.display(description=_("run time"))
    def run_time_display(self, obj: OutboxMessage) -> str:
        return run_duration(obj)

    @admin.display(description=_("payload"))
    def payload_pretty(self, obj: OutboxMessage) -> str:
        # The event's payload, read by the shared id (models/outbox.py).
        return format_html('<pre class="dsched-json">{}</pre>', pretty_json(obj.delivered_payload))

    @admin.display(description=_("last error"))
    def last_error_pretty(self, obj: OutboxMessage) -> str:
        return format_html("<pre>{}</pre>", obj.last_error) if obj.last_error else "-"

    # -- permissions for the actions ------------------------------------------------------
    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dsched.retry_outboxmessage")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dsched.discard_outboxmessage")

    def _report(self, request: HttpRequest, outcome: ChangeCount, done: StrOrPromise) -> None:
        self.message_user(
            request,
            ngettext(
                "%(count)d dead letter %(done)s.",
                "%(count)d dead letters %(done)s.",
                outcome.changed,
            )
            % {"count": outcome.changed, "done": done},
            messages.SUCCESS if outcome.changed else messages.INFO,
        )
        if outcome.skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d message was skipped: it is not a dead letter.",
                    "%(count)d messages were skipped: they are not dead letters.",
                    outcome.skipped,
                )
                % {"count": outcome.skipped},
                messages.WARNING,
            )

    @admin.action(description=_("Retry selected dead letters"), permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        self._report(request, dead_letters.retry(queryset), _("queued for delivery again"))

    @admin.action(description=_("Discard selected dead letters"), permissions=["discard"])
    def discard_selected(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        self._report(request, dead_letters.discard(queryset), _("discarded"))
