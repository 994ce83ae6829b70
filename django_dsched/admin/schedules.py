"""The schedule admin: the list at a glance, the form, its preview and history, actions."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from django_dsched.admin import health, schedule_panels, tenancy
from django_dsched.admin.base import ASSETS, ShownTimes, unstorable_query
from django_dsched.admin.display import EMPTY, badge, breakable, markup, moment, time_display
from django_dsched.admin.filters import HostFilter, ScheduleValuesFilter, index_distinct
from django_dsched.admin.schedule_actions import ScheduleActionsMixin
from django_dsched.admin.schedule_form import ScheduleForm
from django_dsched.admin.schedule_list import (
    OUTBOX_URL,
    ScheduleChangeList,
    SchedulePaginator,
    checkbox,
)
from django_dsched.admin.tenancy import TenantScoped
from django_dsched.changes import edits
from django_dsched.changes.describe import both_times, describe, is_utc, zone_of
from django_dsched.enums import PLANNED, DeliveryStatus, ScheduleOrigin, ScheduleState
from django_dsched.models import Schedule, SchedulerInstance
from django_dsched.models.order import next_fire_order
from django_dsched.models.schedule import resolve_host
from django_dsched.runtime.clock import database_now


def state_label(state: str) -> str:
    """A state's label (``get_state_display`` builds the field's choices on every call)."""
    try:
        return str(ScheduleState(state).label)
    except ValueError:
        return state


def many_hosts(request: HttpRequest) -> bool:
    """Whether the schedules belong to more than one host (read once per request, from the
    index on (host_id, schedule_name): two probes)."""
    found: bool | None = getattr(request, "_dsched_many_hosts", None)
    if found is None:
        allowed = tenancy.hosts(request)
        found = (
            len(index_distinct(Schedule, "host_id", 2)) > 1 if allowed is None else len(allowed) > 1
        )
        request._dsched_many_hosts = found  # type: ignore[attr-defined]
    return found


@admin.register(Schedule)
class ScheduleAdmin(TenantScoped, ShownTimes, ScheduleActionsMixin):
    form = ScheduleForm
    change_form_template = "admin/dsched/schedule/change_form.html"
    change_list_template = "admin/dsched/schedule/change_list.html"
    # Most telling first; six columns, which fit a laptop's screen beside the navigation and
    # the filters (a schedule's health under its state). With more than one host, each name
    # shows its host under it.
    list_display = [
        "name",
        "state_and_health",
        "next_run",
        "frequency",
        "last_fire",
        "deliveries",
    ]
    list_display_links = ["name"]
    list_filter = [
        "state",
        health.HealthFilter,
        ("event_topic", ScheduleValuesFilter),
        ("event_type", ScheduleValuesFilter),
        "schedule_kind",
        ("host_id", HostFilter),
        "origin",
    ]
    search_fields = ["schedule_name", "event_topic", "event_type", "=idempotency_key"]
    ordering = ["next_run_ts"]
    show_full_result_count = False
    # A page reads its rows, not the table (admin/schedule_list.py).
    paginator = SchedulePaginator
    save_on_top = False
    fieldsets = [
        (None, {"fields": ["schedule_name", "host_id", "seen_version"]}),
        (
            _("Timing"),
            {
                "fields": [
                    "schedule_kind",
                    ("frequency_time", "frequency_unit"),
                    "cron_expression",
                    "rrule",
                    "time_zone",
                    ("start_ts", "end_ts"),
                    "max_fires",
                    ("jitter_seconds", "priority"),
                ]
            },
        ),
        (_("Business calendars"), {"fields": ["calendar_ids", "calendar_policy"]}),
        (
            _("Missed fires"),
            {"fields": ["misfire_policy", ("misfire_grace_seconds", "catch_up_limit")]},
        ),
        # The overlap and failure policies (docs/overlap.md).
        (_("While the previous run goes"), {"fields": ["overlap_policy", "pause_on_failure"]}),
        (_("Event"), {"fields": ["event_topic", "event_type", "event_data"]}),
        (
            _("Health"),
            {
                "classes": ["collapse"],
                "fields": [
                    ("health_grace_seconds", "failure_tolerance"),
                    ("max_runtime_seconds", "monitored"),
                ],
            },
        ),
        (
            _("Status"),
            {
                "classes": ["dsched-status"],
                "fields": [
                    ("state_badge", "origin"),
                    "idempotency_key",
                    ("set_aside_reason", "set_aside_at"),
                    ("paused_reason", "paused_until_display"),
                    ("next_run_display", "last_fired"),
                    ("fire_count", "misfire_count"),
                    ("skip_count", "buffer_count", "held_for"),
                    "aggregate_version",
                    ("created", "updated"),
                ],
            },
        ),
    ]
    readonly_fields = [
        "idempotency_key",
        "state_badge",
        "origin",
        "set_aside_reason",
        "set_aside_at",
        "paused_reason",
        "paused_until_display",
        "next_run_display",
        "last_fired",
        "fire_count",
        "misfire_count",
        "skip_count",
        "buffer_count",
        "held_for",
        "aggregate_version",
        "created",
        "updated",
    ]
    # Times as every dsched page writes them (not Django's "Nov. 27, 2026, 3:14 a.m.").
    # The schedule's own times on its zone's wall clock, and in UTC.
    set_aside_at = time_display(Schedule, "set_aside_ts")
    paused_until_display = time_display(Schedule, "paused_until", in_zone=True)
    next_run_display = time_display(Schedule, "next_run_ts", in_zone=True)
    last_fired = time_display(Schedule, "last_fired_ts", in_zone=True)
    created = time_display(Schedule, "created_ts")
    updated = time_display(Schedule, "updated_ts")

    class Media:
        css = ASSETS["css"]
        js = [*ASSETS["js"], "dsched/schedule_form.js"]

    # -- the change list ------------------------------------------------------------------
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def get_ordering(self, request: HttpRequest) -> Any:
        """Schedules that will fire first, soonest first; then those that ended."""
        return next_fire_order()

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = self._fieldsets(request, obj)
        if tenancy.hosts(request) is None and not many_hosts(request):
            # One tenant: its host id is nothing to read or edit at a glance; it stays in a
            # folded section at the foot (to add a schedule for a first other tenant).
            first_name, first = fieldsets[0]
            fields = [f for f in first["fields"] if f != "host_id"]
            fieldsets = [
                (first_name, {**first, "fields": fields}),
                *fieldsets[1:],
                (
                    _("Tenant"),
                    {
                        "classes": ["collapse"],
                        "fields": ["host_id"],
                        "description": _(
                            "All schedules belong to one tenant (host): leave it as it is "
                            "unless you serve several."
                        ),
                    },
                ),
            ]
        return fieldsets

    def get_list_display(self, request: HttpRequest) -> Any:
        if not many_hosts(request):
            return self.list_display
        return ["name_and_host", *self.list_display[1:]]

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        return [list_display[0]]

    def action_checkbox(self, obj: Schedule) -> SafeString:
        """Django's column (its header is the admin's own), each row's box written as
        Django writes it, without a form widget rendered per row."""
        return checkbox(obj)

    @admin.display(description=_("name"), ordering="schedule_name")
    def name(self, obj: Schedule) -> str:
        return breakable(obj.schedule_name)

    @admin.display(description=_("name"), ordering="schedule_name")
    def name_and_host(self, obj: Schedule) -> str:
        full = str(obj.host_id)
        return markup(
            '{}<br><small class="dsched-muted">{} <code title="{}">{}</code></small>',
            breakable(obj.schedule_name),
            _("host"),
            full,
            full[:8],
        )

    @admin.display(description=_("frequency"))
    def frequency(self, obj: Schedule) -> str:
        return breakable(describe(obj))

    @admin.display(description=_("next run"), ordering="next_run_ts")
    def next_run(self, obj: Schedule) -> str:
        if obj.state not in PLANNED:
            return EMPTY
        return moment(
            obj.next_run_ts,
            getattr(obj, "db_now", None),
            quiet=obj.state != ScheduleState.ACTIVE,
            zone=zone_of(obj),
        )

    @admin.display(description=_("held for run"))
    def held_for(self, obj: Schedule) -> str:
        """The run the next slot waits for (its outbox message), or nothing."""
        if obj.held_by is None:
            return EMPTY
        url = reverse("admin:dsched_outboxmessage_change", args=[obj.held_by])
        return markup('<a href="{}"><code>{}</code></a>', url, str(obj.held_by)[:8])

    @admin.display(description=_("last fire"), ordering="last_fired_ts")
    def last_fire(self, obj: Schedule) -> str:
        return moment(obj.last_fired_ts, getattr(obj, "db_now", None), zone=zone_of(obj))

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, obj: Schedule) -> str:
        title = ""
        if obj.state == ScheduleState.PAUSED:
            title = obj.paused_reason
            if obj.paused_until:
                title = f"{title} (→ {both_times(obj.paused_until, zone_of(obj))})".strip()
        elif obj.state == ScheduleState.SET_ASIDE:
            # The scheduler could not plan it: the error is the point, so it is shown.
            return markup(
                '{}<br><small class="dsched-set-aside-reason">{}</small>',
                badge(obj.state, state_label(obj.state), title=obj.set_aside_reason),
                obj.set_aside_reason,
            )
        return badge(obj.state, state_label(obj.state), title=title)

    @admin.display(description=_("state · health"), ordering="state")
    def state_and_health(self, obj: Schedule) -> str:
        """The state's badge and, under it, the health's (when the state does not say it
        already), since when and why for a health that wants attention."""
        shown = health.cell(obj, getattr(obj, "db_now", None), implied=True)
        return markup("{}<br>{}", self.state_badge(obj), shown) if shown else self.state_badge(obj)

    @admin.display(description=_("deliveries"), ordering="dead_letters")
    def deliveries(self, obj: Schedule) -> str:
        """What to worry about: messages being retried and dead letters, each a link to
        the outbox list of those messages, which shows their last error."""
        # Reversed once for the page's rows (schedule_list.page_rows).
        url = getattr(obj, OUTBOX_URL, None) or reverse("admin:dsched_outboxmessage_changelist")
        links = []
        for count, query, tone, kind, text, title in (
            (
                getattr(obj, "retrying", 0),
                {"retrying": "yes"},
                "warn",
                "retrying",
                _("%(count)d retrying"),
                _("Deliveries that failed and will be tried again: see their errors."),
            ),
            (
                getattr(obj, "dead_letters", 0),
                {"status__exact": DeliveryStatus.DELIVERY_FAILED.value},
                "bad",
                "dead",
                _("%(count)d dead"),
                _("Dead letters (no more attempts): see their errors, retry or discard them."),
            ),
        ):
            if count:
                links.append(
                    markup(
                        '<a class="dsched-badge dsched-{} dsched-deliveries-{}" href="{}?{}" '
                        'title="{}">{}</a>',
                        tone,
                        kind,
                        url,
                        urlencode({"aggregate_id": str(obj.pk), **query}),
                        title,
                        text % {"count": count},
                    )
                )
        if not links:
            return markup('<span class="dsched-muted">{}</span>', EMPTY)
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        refused = unstorable_query(request)
        if refused is not None:
            return refused
        cluster = self.admin_site._registry.get(SchedulerInstance)
        if cluster is not None and cluster.has_view_permission(request):
            extra_context = {
                **(extra_context or {}),
                "dsched_cluster_url": reverse("admin:dsched_schedulerinstance_changelist"),
            }
        return super().changelist_view(request, extra_context)

    # -- the page of one schedule ---------------------------------------------------------
    def _fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            # A new schedule has no status yet (its times are the database's to fill).
            return [
                (name, options)
                for name, options in fieldsets
                if "dsched-status" not in options.get("classes", ())
            ]
        if self.has_change_permission(request, obj):
            return fieldsets
        # Read-only page: the version field is for saving only.
        first_name, first = fieldsets[0]
        fields = [f for f in first["fields"] if f != "seen_version"]
        return [(first_name, {**first, "fields": fields}), *fieldsets[1:]]

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "<path:object_id>/do/<str:action>/",
                self.admin_site.admin_view(self.object_action_view),
                name="{}_{}_do".format(*info),
            ),
            *super().get_urls(),
        ]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A cancelled schedule is history: it can be seen, not edited.
        if obj is not None and obj.state == ScheduleState.CANCELLED:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting would orphan the history; cancel instead.
        return False

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Schedule | None = None,
    ) -> Any:
        if obj is not None and obj.pk and not add:
            saved = obj
            if request.method == "POST":
                # A refused form left its edits on ``obj`` (maybe a blank start or a bad
                # unit): the panels show what is saved, as on a fresh page.
                saved = Schedule.objects.filter(pk=obj.pk).first() or obj
            now = database_now()
            context.update(
                dsched_now=now,
                dsched_buttons=self.buttons(request, saved),
                dsched_preview=[
                    (moment(t, now, zone=zone_of(saved)), note)
                    for t, note in schedule_panels.preview(saved, now)
                ],
                dsched_calendar_slots=schedule_panels.calendar_slots(saved, now),
                dsched_events=schedule_panels.events(request, saved, now),
                dsched_deliveries=schedule_panels.deliveries(request, saved, now),
                dsched_from_code=saved.origin == ScheduleOrigin.CODE,
                dsched_frequency=describe(saved),
                dsched_health=health.panel(saved, now),
                dsched_zone_is_utc=is_utc(zone_of(saved)),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> type[ScheduleForm]:
        form = super().get_form(request, obj, change=change, **kwargs)
        # An edit that ends the schedule or fires it at once needs cancel / run now; a
        # schedule goes only to the hosts the user may see.
        return type(
            form.__name__,
            (form,),
            {
                "may_complete": self.has_cancel_permission(request),
                "may_fire": self.has_trigger_permission(request),
                "hosts": tenancy.hosts(request),
            },
        )

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        allowed = tenancy.hosts(request)
        if allowed and "host_id" not in initial and resolve_host(None) not in allowed:
            initial["host_id"] = str(allowed[0])  # the default host is not one of theirs
        return initial

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        changed = [f for f in form.changed_data if f != "seen_version"] if change else None
        try:
            edits.save_schedule(
                obj,
                changed,
                actor=request.user,
                expected_version=form.cleaned_data.get("seen_version") if change else None,
                may_complete=self.has_cancel_permission(request),
                may_fire=self.has_trigger_permission(request),
            )
        except ValidationError as exc:
            # The form checked the version with the row locked; only a change by code
            # running in this same transaction could get here.
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)
            return
        late = getattr(obj, "late", None)
        if late is not None:  # a one-shot whose time had passed: it fires late, or not
            self.message_user(request, late.describe(obj.schedule_name), messages.WARNING)
