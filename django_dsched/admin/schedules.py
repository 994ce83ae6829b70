from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import services
from ..enums import FrequencyUnit
from ..models import Schedule


def describe_frequency(schedule: Schedule) -> str:
    """Human-readable frequency, such as "every 15 minutes"."""
    n = schedule.frequency_time
    phrases = {
        FrequencyUnit.SECONDS: ngettext("every second", "every %(n)d seconds", n),
        FrequencyUnit.MINUTES: ngettext("every minute", "every %(n)d minutes", n),
        FrequencyUnit.HOURS: ngettext("every hour", "every %(n)d hours", n),
        FrequencyUnit.DAYS: ngettext("every day", "every %(n)d days", n),
        FrequencyUnit.WEEKS: ngettext("every week", "every %(n)d weeks", n),
        FrequencyUnit.MONTHS: ngettext("every month", "every %(n)d months", n),
        FrequencyUnit.YEARS: ngettext("every year", "every %(n)d years", n),
    }
    return phrases[FrequencyUnit(schedule.frequency_unit)] % {"n": n}


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = [
        "schedule_name",
        "event_topic",
        "event_type",
        "frequency",
        "next_run_ts",
        "state",
        "aggregate_version",
    ]
    list_filter = ["state", "frequency_unit", "event_topic", "event_type"]
    search_fields = ["schedule_name", "event_topic", "event_type"]
    ordering = ["next_run_ts"]
    show_full_result_count = False
    fields = [
        "schedule_name",
        "host_id",
        ("frequency_time", "frequency_unit"),
        "start_ts",
        "event_topic",
        "event_type",
        "event_data",
        "state",
        "next_run_ts",
        "last_fired_ts",
        "fire_count",
        "aggregate_version",
        "created_ts",
        "updated_ts",
    ]
    readonly_fields = [
        "state",
        "next_run_ts",
        "last_fired_ts",
        "fire_count",
        "aggregate_version",
        "created_ts",
        "updated_ts",
    ]
    actions = ["pause_selected", "resume_selected", "cancel_selected"]

    @admin.display(description=_("frequency"))
    def frequency(self, obj: Schedule) -> str:
        return describe_frequency(obj)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        try:
            services.save_schedule(obj, form.changed_data if change else None)
        except ValidationError as exc:
            # The form validated; only a concurrent cancel can get here.
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)

    # -- permissions for the actions ------------------------------------------------------
    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dsched.pause_schedule")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dsched.cancel_schedule")

    def _report(self, request: HttpRequest, outcome: services.Outcome, done: str) -> None:
        self.message_user(
            request,
            ngettext(
                "%(count)d schedule %(done)s.", "%(count)d schedules %(done)s.", outcome.changed
            )
            % {"count": outcome.changed, "done": done},
            messages.SUCCESS if outcome.changed else messages.INFO,
        )
        if outcome.skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d schedule was skipped: its state does not allow it.",
                    "%(count)d schedules were skipped: their state does not allow it.",
                    outcome.skipped,
                )
                % {"count": outcome.skipped},
                messages.WARNING,
            )

    @admin.action(description=_("Pause selected schedules"), permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._report(request, services.pause(queryset), _("paused"))

    @admin.action(description=_("Resume selected schedules"), permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._report(request, services.resume(queryset), _("resumed"))

    @admin.action(description=_("Cancel selected schedules"), permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._report(request, services.cancel(queryset), _("cancelled"))
