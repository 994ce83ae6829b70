from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import services
from ..describe import describe
from ..models import Schedule


class ScheduleForm(forms.ModelForm):
    """The schedule form, with the version it was read at (for the concurrent-edit check)."""

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Schedule
        fields = [
            "schedule_name",
            "host_id",
            "schedule_kind",
            "frequency_time",
            "frequency_unit",
            "cron_expression",
            "time_zone",
            "start_ts",
            "end_ts",
            "max_fires",
            "jitter_seconds",
            "priority",
            "misfire_policy",
            "misfire_grace_seconds",
            "catch_up_limit",
            "event_topic",
            "event_type",
            "event_data",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.fields["seen_version"].initial = self.instance.aggregate_version

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        seen = cleaned.get("seen_version")
        if self.instance.pk and seen is not None:
            current = (
                Schedule.objects.filter(pk=self.instance.pk)
                .values_list("aggregate_version", flat=True)
                .first()
            )
            if current is not None and current != seen:
                raise forms.ValidationError(
                    _(
                        "This schedule changed since you opened it (it fired or someone "
                        "edited it): version %(seen)d is now %(current)d. Your changes were "
                        "not saved; reload the page and apply them again."
                    ),
                    code="conflict",
                    params={"seen": seen, "current": current},
                )
        return cleaned


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "schedule_name",
        "event_topic",
        "event_type",
        "frequency",
        "next_run_ts",
        "state",
        "aggregate_version",
    ]
    list_filter = ["state", "schedule_kind", "event_topic", "event_type", "origin"]
    search_fields = ["schedule_name", "event_topic", "event_type"]
    ordering = ["next_run_ts"]
    show_full_result_count = False
    fieldsets = [
        (None, {"fields": ["schedule_name", "host_id", "seen_version"]}),
        (
            _("Timing"),
            {
                "fields": [
                    "schedule_kind",
                    ("frequency_time", "frequency_unit"),
                    ("cron_expression", "time_zone"),
                    ("start_ts", "end_ts"),
                    "max_fires",
                    ("jitter_seconds", "priority"),
                ]
            },
        ),
        (
            _("Missed fires"),
            {"fields": ["misfire_policy", ("misfire_grace_seconds", "catch_up_limit")]},
        ),
        (_("Event"), {"fields": ["event_topic", "event_type", "event_data"]}),
        (
            _("Status"),
            {
                "fields": [
                    ("state", "origin"),
                    ("paused_reason", "paused_until"),
                    ("next_run_ts", "last_fired_ts"),
                    ("fire_count", "misfire_count"),
                    "aggregate_version",
                    ("created_ts", "updated_ts"),
                ]
            },
        ),
    ]
    readonly_fields = [
        "state",
        "origin",
        "paused_reason",
        "paused_until",
        "next_run_ts",
        "last_fired_ts",
        "fire_count",
        "misfire_count",
        "aggregate_version",
        "created_ts",
        "updated_ts",
    ]
    actions = ["pause_selected", "resume_selected", "cancel_selected"]

    @admin.display(description=_("frequency"))
    def frequency(self, obj: Schedule) -> str:
        return describe(obj)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        changed = [f for f in form.changed_data if f != "seen_version"] if change else None
        try:
            services.save_schedule(
                obj,
                changed,
                actor=request.user,
                expected_version=form.cleaned_data.get("seen_version") if change else None,
            )
        except ValidationError as exc:
            # The form validated; only a change in the last milliseconds can get here.
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
        self._report(request, services.pause(queryset, actor=request.user), _("paused"))

    @admin.action(description=_("Resume selected schedules"), permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._report(request, services.resume(queryset, actor=request.user), _("resumed"))

    @admin.action(description=_("Cancel selected schedules"), permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._report(request, services.cancel(queryset, actor=request.user), _("cancelled"))
