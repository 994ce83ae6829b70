from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_dsched.admin.base import ReadOnlyAdmin, pretty_json
from django_dsched.admin.display import (
    EMPTY,
    absolute,
    breakable,
    duration,
    run_badge,
    run_duration,
    time_display,
)
from django_dsched.admin.filters import OutboxTopicFilter
from django_dsched.admin.tenancy import TenantScoped
from django_dsched.counts import ChangeCount
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox import dead_letters, phases

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

# A message whose delivery failed and will be tried again: pending, with the error of an
# attempt (a claim counts an attempt before it fails, and clears the phases, not the error).
RETRYING = Q(status=DeliveryStatus.PENDING) & ~Q(last_error="")


OUTBOX_FIELDS = (
    "id",
    "topic",
    "event_type",
    "status",
    "run_status_badge",
    "picked",
    "started",
    "completed",
    "failed",
    "queue_wait_display",
    "run_time_display",
    "priority",
    "attempts",
    "next_attempt",
    "delivered",
    "last_error_pretty",
    "claimed_by",
    "claimed_until_display",
    "aggregate_id",
    "aggregate_version",
    "host_id",
    "fired",
    "payload_pretty",
)

# The last error as the list shows it: enough to recognise it; the message's page has all.
ERROR_SHOWN = 160


class RetryingFilter(admin.SimpleListFilter):
    """Messages whose delivery failed and will be tried again (pending, with an error)."""

    title = _("retries")
    parameter_name = "retrying"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, StrOrPromise]]:
        return [("yes", _("failed, to be tried again"))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[OutboxMessage]
    ) -> QuerySet[OutboxMessage]:
        if self.value() == "yes":
            return queryset.filter(RETRYING)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(TenantScoped, ReadOnlyAdmin):
    # Fits a laptop's screen beside the filters: the run's badge says the status, the
    # topic sits under the event type, the attempts say when the next one is due, and the
    # last error is in the list (the schedule list links here for it).
    list_display = [
        "message",
        "fired",
        "run_status_badge",
        "attempts_display",
        "timing",
        "last_error_short",
    ]
    list_display_links = ["message"]
    list_filter = ["status", RetryingFilter, ("topic", OutboxTopicFilter)]
    search_fields = ["=id", "=aggregate_id", "topic", "event_type"]
    fields = readonly_fields = OUTBOX_FIELDS
    actions = ["retry_selected", "discard_selected"]
    fired = time_display(OutboxMessage, "event_ts", description=_("fired"))
    # Sorted by id, which is time-ordered (no index on the time: history/event_ids.py).
    fired.admin_order_field = "id"  # type: ignore[attr-defined]
    picked = time_display(OutboxMessage, "picked_ts")
    started = time_display(OutboxMessage, "started_ts")
    completed = time_display(OutboxMessage, "completed_ts")
    failed = time_display(OutboxMessage, "failed_ts")
    next_attempt = time_display(OutboxMessage, "next_attempt_ts")
    delivered = time_display(OutboxMessage, "delivered_ts")
    claimed_until_display = time_display(OutboxMessage, "claimed_until")

    # -- the list's columns ---------------------------------------------------------------
    @admin.display(description=_("message"), ordering="event_type")
    def message(self, obj: OutboxMessage) -> SafeString:
        return format_html(
            '{}<br><small class="dsched-muted">{}</small>',
            breakable(obj.event_type),
            breakable(obj.topic),
        )

    @admin.display(description=_("attempts"), ordering="attempts")
    def attempts_display(self, obj: OutboxMessage) -> SafeString:
        if obj.status == DeliveryStatus.PENDING and obj.next_attempt_ts is not None:
            return format_html(
                '{}<br><small class="dsched-muted">{} {}</small>',
                obj.attempts,
                _("next"),
                absolute(obj.next_attempt_ts),
            )
        return format_html("{}", obj.attempts)

    @admin.display(description=_("wait / run"))
    def timing(self, obj: OutboxMessage) -> SafeString:
        wait = duration(phases.queue_wait(obj.event_ts, obj.picked_ts))
        run = run_duration(obj)
        if wait == run == EMPTY:
            return format_html("{}", EMPTY)
        return format_html("{}<br>{}", wait, run)

    @admin.display(description=_("last error"))
    def last_error_short(self, obj: OutboxMessage) -> SafeString:
        if not obj.last_error:
            return format_html("{}", EMPTY)
        text = obj.last_error
        if len(text) > ERROR_SHOWN:
            text = text[: ERROR_SHOWN - 1] + "…"
        return format_html('<span class="dsched-error-short">{}</span>', text)

    # -- the run: derived status and durations (outbox.phases) ------------------------------
    @admin.display(description=_("run"))
    def run_status_badge(self, obj: OutboxMessage) -> SafeString:
        return run_badge(obj)

    @admin.display(description=_("queue wait"))
    def queue_wait_display(self, obj: OutboxMessage) -> str:
        return duration(phases.queue_wait(obj.event_ts, obj.picked_ts))

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
