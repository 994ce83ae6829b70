"""Business calendars: public holidays of a country, days off by hand, weekend days and
blackout windows (inline), per tenant. A user limited to some tenants sees theirs and the
operator's (shared with every tenant, read-only to them), and changes theirs only.

A save writes the calendar alone (a new version): every schedule using it plans with it
from its next plan, and each one's preview shows it at once. A calendar a live schedule
uses cannot be deleted.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.translation import gettext_lazy as _

from django_dsched.admin import tenancy
from django_dsched.admin.base import ASSETS, ShownTimes
from django_dsched.admin.display import time_display
from django_dsched.changes import calendars as service
from django_dsched.changes import permissions as rules
from django_dsched.conf import app_settings
from django_dsched.models import Calendar, CalendarWindow
from django_dsched.models.calendar import MAX_WINDOWS, WEEKDAYS

if TYPE_CHECKING:
    CalendarModelForm = forms.ModelForm[Calendar]
    WindowInline = admin.TabularInline[CalendarWindow, Calendar]
else:
    CalendarModelForm = forms.ModelForm
    WindowInline = admin.TabularInline


class CalendarForm(CalendarModelForm):
    """A calendar's form: its host is one the user may see (admin/tenancy.py)."""

    hosts: list[uuid.UUID] | None = None  # set per request; None: every host

    class Meta:
        model = Calendar
        fields = [
            "name",
            "host_id",
            "country",
            "subdivision",
            "first_year",
            "last_year",
            "added_dates",
            "removed_dates",
            "weekend_days",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.hosts is not None and "host_id" in self.fields:
            self.fields["host_id"].widget = forms.Select(
                choices=[(str(host), str(host)) for host in self.hosts]
            )

    def clean_host_id(self) -> Any:
        return tenancy.allowed_host(self.hosts, self.cleaned_data.get("host_id"))


class WindowInlineAdmin(WindowInline):
    model = CalendarWindow
    extra = 0
    max_num = MAX_WINDOWS
    fields = [
        "kind",
        "label",
        "start_ts",
        "end_ts",
        "start_day",
        "start_time",
        "end_day",
        "end_time",
        "time_zone",
    ]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        # max_num alone only limits the blank rows shown: refuse a post with more windows.
        kwargs.setdefault("validate_max", True)
        return super().get_formset(request, obj, **kwargs)


@admin.register(Calendar)
class CalendarAdmin(tenancy.TenantEdited, ShownTimes):
    form = CalendarForm
    inlines = [WindowInlineAdmin]
    list_display = ["name", "host_id", "country", "subdivision", "weekend", "version", "updated"]
    search_fields = ["name", "country"]
    ordering = ["name"]
    readonly_fields = ["holiday_list", "version", "updated"]
    fieldsets = [
        (None, {"fields": ["name", "host_id"]}),
        (
            _("Public holidays"),
            {"fields": ["country", "subdivision", ("first_year", "last_year"), "holiday_list"]},
        ),
        (_("Days off"), {"fields": ["added_dates", "removed_dates", "weekend_days"]}),
        (None, {"fields": [("version", "updated")]}),
    ]
    updated = time_display(Calendar, "updated_ts")

    class Media:
        css = ASSETS["css"]
        js = ASSETS["js"]

    @admin.display(description=_("weekend"))
    def weekend(self, obj: Calendar) -> str:
        names = dict(WEEKDAYS)
        return ", ".join(str(names.get(day, day)) for day in obj.weekend_days or ()) or "-"

    @admin.display(description=_("public holidays"))
    def holiday_list(self, obj: Calendar) -> str:
        if not obj.holidays:
            return "-"
        return format_html_join(", ", "{} ({})", ((day, name) for day, name in obj.holidays))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # The user's hosts' and the operator's (shared).
        queryset = admin.ModelAdmin.get_queryset(self, request)
        allowed = tenancy.hosts(request)
        if allowed is None:
            return queryset
        return queryset.filter(host_id__in=[*allowed, app_settings.DEFAULT_HOST_ID])

    def _own(self, request: HttpRequest, obj: Any) -> bool:
        """Whether ``obj`` (None: any) is of one of the user's hosts (the operator's are
        shared with tenants, read-only to them)."""
        allowed = tenancy.hosts(request)
        return obj is None or allowed is None or obj.host_id in allowed

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.VIEW_CALENDARS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return rules.allows(request.user, rules.ADD_CALENDARS)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return rules.allows(request.user, rules.CHANGE_CALENDARS) and self._own(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Not while a live schedule uses it (one probe of the schedules' calendars index).
        return (
            rules.allows(request.user, rules.DELETE_CALENDARS)
            and self._own(request, obj)
            and (obj is None or not service.in_use(obj))
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        form.instance.touch()  # its windows changed: a new version for the next plans

    def delete_model(self, request: HttpRequest, obj: Calendar) -> None:
        problem = service.in_use(obj)
        if problem:
            self.message_user(request, problem, messages.ERROR)
            return
        service.delete_calendar(obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for calendar in queryset:
            self.delete_model(request, calendar)
