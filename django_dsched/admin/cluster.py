"""The cluster page (reached from the admin index as "Scheduler instances") and the leases."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from django_dsched.admin.base import ASSETS, AnyModelAdmin, ReadOnlyAdmin
from django_dsched.admin.display import age, badge, moment, time_display
from django_dsched.admin.health import cluster_charts
from django_dsched.cluster.status import cluster_status
from django_dsched.models import Lease, SchedulerInstance


def role_label(role: str) -> str:
    return {"leader": _("leader"), "standby": _("standby"), "owner": _("owner")}.get(role, role)


@admin.register(SchedulerInstance)
class ClusterAdmin(AnyModelAdmin):
    """Its change list is the cluster page; instances are written by the schedulers only."""

    class Media:
        css = ASSETS["css"]
        js = ASSETS["js"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> TemplateResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        status = cluster_status()
        now = status.now
        leader = status.leader
        context = {
            **self.admin_site.each_context(request),
            "title": _("Cluster"),
            "subtitle": None,
            "opts": self.opts,
            "media": self.media,
            "status": status,
            "leader": leader,
            "leader_badge": (
                badge("leader", _("leading"))
                if leader and leader.live
                else badge("stale", _("no leader"))
            ),
            "heartbeat_age": age(leader.heartbeat_seconds)
            if leader and not leader.released
            else "",
            "acquired": moment(leader.acquired, now) if leader else "",
            "leases_url": reverse("admin:dsched_lease_changelist")
            if self.admin_site._registry.get(Lease) is not None
            and self.admin_site._registry[Lease].has_view_permission(request)
            else None,
            "instances": [
                {
                    "row": item.row,
                    "role": badge(
                        "stale" if item.stale else item.row.role,
                        _("stale") if item.stale else role_label(item.row.role),
                    ),
                    "seen": age(item.seen_seconds),
                    "up": age(item.up_seconds),
                }
                for item in status.instances
            ],
            "buckets": [
                {
                    "bucket": item.bucket,
                    "holder": item.holder if item.live else "",
                    "badge": badge("leader", _("held")) if item.live else badge("stale", _("free")),
                    "owner": item.owner or "",
                    "standbys": ", ".join(item.standbys),
                    "moving": item.live and item.owner is not None and item.holder != item.owner,
                    "epoch": item.epoch,
                    "heartbeat": age(item.heartbeat_seconds)
                    if item.heartbeat_seconds is not None
                    else _("released"),
                }
                for item in status.buckets or []
            ],
            "buckets_held": sum(1 for item in status.buckets or [] if item.live),
            "circuits": [
                {
                    "row": item.row,
                    "badge": badge("stale", _("stale"))
                    if item.stale
                    else badge("stale", _("open"))
                    if item.seconds_left > 0
                    else badge("standby", _("probing")),
                    "until": moment(item.row.until_ts, now),
                }
                for item in status.circuits or []
            ],
            "recent": age(status.recent_seconds),
            "oldest_due": moment(status.oldest_due, now) if status.oldest_due else "",
            "oldest_pending_at": (
                moment(status.oldest_pending.event_ts, now) if status.oldest_pending else ""
            ),
            "now_display": moment(now, None),
            "dsched_activity": cluster_charts(now),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/dsched/cluster.html", context)


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    """The lease rows, linked from the cluster page: one entry in the admin's index (the
    cluster's), not two for what users see as one page."""

    list_display = ["lease_id", "instance_id", "epoch", "heartbeat", "acquired"]

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        return {}  # not listed in the index; its pages stay where the cluster page links

    heartbeat = time_display(Lease, "last_heartbeat")
    acquired = time_display(Lease, "acquired_ts")
