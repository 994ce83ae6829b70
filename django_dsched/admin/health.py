"""Schedule health in the admin: the list's column and filter, the schedule page's panel
(its recent slots, scheduled against actual, as a timeline and a lag chart, and the next
ones), and the cluster page's last hour. Judged by :mod:`django_dsched.health`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_dsched.admin import charts
from django_dsched.admin.display import absolute, markup, moment, relative, zoned
from django_dsched.changes.describe import both_times, zone_of
from django_dsched.conf import app_settings
from django_dsched.enums import UNHEALTHY, Health
from django_dsched.health import activity, judge
from django_dsched.health.slots import Outcome, recent_slots
from django_dsched.models import Schedule

# A badge's tone by health state (admin.css: ok, warn, bad, quiet).
TONES: dict[str, str] = {
    Health.OK: "ok",
    Health.NEW: "quiet",
    Health.LATE: "bad",
    Health.STUCK: "bad",
    Health.FAILING: "bad",
    Health.PAUSED: "warn",
    Health.SET_ASIDE: "bad",
    Health.ENDED: "quiet",
}
# Slots the timeline shows, and the table of recent and next ones.
TIMELINE_SLOTS = 60
TABLE_SLOTS = 10
ALL_UNHEALTHY = "UNHEALTHY"


class HealthFilter(admin.SimpleListFilter):
    title = gettext_lazy("health")
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(ALL_UNHEALTHY, _("needs attention")), *Health.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == ALL_UNHEALTHY:
            return judge.filter_health(queryset, *UNHEALTHY)
        if value in Health.values:
            return judge.filter_health(queryset, value)
        return queryset


def badge(verdict: judge.Verdict) -> SafeString:
    return markup(
        '<span class="dsched-badge dsched-{} dsched-health-{}" title="{}">{}</span>',
        TONES.get(verdict.state, "quiet"),
        verdict.state.lower().replace("_", "-"),
        verdict.text,
        verdict.label,
    )


# The health states a schedule's state already says (paused, set aside, ended).
SAID_BY_STATE = (Health.PAUSED.value, Health.SET_ASIDE.value, Health.ENDED.value)


def cell(obj: Schedule, now: datetime | None, *, implied: bool = False) -> SafeString:
    """The list's health: the badge; for a state that wants attention, since when (relative
    to the database's clock) and why, under it. ``implied``: nothing for a health the
    schedule's state says already (shown beside the state's badge)."""
    if not hasattr(obj, judge.STATE):
        return markup("{}", "-")
    verdict = judge.verdict(obj)
    if implied and verdict.state in SAID_BY_STATE:
        return mark_safe("")
    if verdict.state not in UNHEALTHY:
        return badge(verdict)
    since = relative(verdict.since, now) if verdict.since and now else ""
    return markup(
        '{}<br><small class="dsched-health-why">{}{}</small>',
        badge(verdict),
        markup("{} · ", since) if since else "",
        verdict.text,
    )


def _when(schedule: Schedule) -> Any:
    """A slot's time in its tooltip: on the schedule's zone's wall clock, then in UTC."""
    zone = zone_of(schedule)

    def shown(slot: Any) -> str:
        return both_times(slot.due or slot.slot, zone)

    return shown


def panel(schedule: Schedule, now: datetime) -> dict[str, Any]:
    """The schedule page's health panel: the verdict, the timeline and lag chart of its
    last slots, the last and next :data:`TABLE_SLOTS` slots."""
    verdict = judge.judge(schedule)
    zone = zone_of(schedule)
    slots = recent_slots(schedule, now, TIMELINE_SLOTS)
    grace = float(
        app_settings.HEALTH_GRACE_SECONDS
        if schedule.health_grace_seconds is None
        else schedule.health_grace_seconds
    )
    line = charts.timeline(slots, _when(schedule))
    lag = charts.lag_chart(slots, grace, _when(schedule))
    counted: dict[str, int] = {}
    for slot in slots:
        counted[slot.outcome] = counted.get(slot.outcome, 0) + 1
    return {
        "verdict": verdict,
        "badge": badge(verdict),
        "since": moment(verdict.since, now, zone=zone) if verdict.since else "",
        "timeline": line.svg,
        "timeline_legend": charts.legend(line.legend),
        "lag": lag.svg,
        "lag_top": lag.top,
        "lag_legend": charts.legend(lag.legend),
        "first": zoned(slots[0].due or slots[0].slot, zone) if slots else "",
        "last": zoned(slots[-1].due or slots[-1].slot, zone) if slots else "",
        "counts": [
            (charts.slot_class(value), label, counted[value])
            for value, label in Outcome.choices
            if counted.get(value)
        ],
        "recent": [
            {
                "slot": zoned(slot.slot, zone),
                "due": zoned(slot.due, zone) if slot.due else "-",
                "fired": zoned(slot.fired, zone) if slot.fired else "-",
                "lag": charts.seconds(slot.lag) if slot.lag is not None else "-",
                "outcome": slot.outcome,
                "css": charts.slot_class(slot.outcome),
                "label": Outcome(slot.outcome).label,
                "run": slot.run,
                "message_id": slot.message_id,
            }
            for slot in reversed(slots[-TABLE_SLOTS:])
        ],
        "next": [moment(t, now, zone=zone) for t in schedule.preview(TABLE_SLOTS, now)],
        "grace": charts.seconds(grace),
    }


def cluster_charts(now: datetime) -> dict[str, Any]:
    """The cluster page's last hour: fires and deliveries per minute, the backlog."""
    hour = activity.last_hour(now)
    labels = [f"{m.astimezone(UTC):%H:%M} UTC" for m in hour.minutes]
    fires = charts.bars(
        hour.fires,
        "dsched-fires",
        _("Fires per minute, the last hour"),
        [
            _("%(at)s: %(n)d fires") % {"at": at, "n": n}
            for at, n in zip(labels, hour.fires, strict=True)
        ],
    )
    deliveries = charts.bars(
        hour.deliveries,
        "dsched-deliveries",
        _("Deliveries per minute, the last hour"),
        [
            _("%(at)s: %(n)d delivered, %(d)d dead-lettered") % {"at": at, "n": n, "d": d}
            for at, n, d in zip(labels, hour.deliveries, hour.dead_letters, strict=True)
        ],
    )
    backlog = charts.area(
        hour.backlog,
        "dsched-backlog",
        _("Delivery backlog at the end of each minute, the last hour"),
        [
            _("%(at)s: %(n)d waiting") % {"at": at, "n": n}
            for at, n in zip(labels, hour.backlog, strict=True)
        ],
    )
    return {
        "charts": [
            ("dsched-chart-fires", _("Fires per minute"), fires, sum(hour.fires)),
            (
                "dsched-chart-deliveries",
                _("Deliveries per minute"),
                deliveries,
                sum(hour.deliveries),
            ),
            ("dsched-chart-backlog", _("Delivery backlog"), backlog, hour.backlog[-1]),
        ],
        "start": absolute(hour.minutes[0]),
        "end": absolute(hour.minutes[-1] + timedelta(minutes=1)),
        "first": absolute(hour.minutes[0]),
        "last": _("now"),
    }
