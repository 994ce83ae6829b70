"""Who may do what: the admin's permissions, endpoint by endpoint.

Each endpoint needs one of a set of Django permissions (``user.has_perm``, so groups,
superusers and custom backends work as in the admin). Seeing is the admin's view
permission (``view_*`` or ``change_*``); each action needs the permission of the admin
action that does the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

VIEW_SCHEDULE = ("dsched.view_schedule", "dsched.change_schedule")
VIEW_OUTBOX = ("dsched.view_outboxmessage", "dsched.change_outboxmessage")
VIEW_CLUSTER = ("dsched.view_schedulerinstance", "dsched.change_schedulerinstance")

# {view's permission table: {action: the permissions any one of which allows it}}
SCHEDULES: Mapping[str, tuple[str, ...]] = {
    "list": VIEW_SCHEDULE,
    "retrieve": VIEW_SCHEDULE,
    "preview": VIEW_SCHEDULE,
    "dry_run": VIEW_SCHEDULE,
    "events": VIEW_SCHEDULE,
    "deliveries": VIEW_SCHEDULE,
    "status_by_key": VIEW_SCHEDULE,
    "create": ("dsched.add_schedule",),
    "update": ("dsched.change_schedule",),
    "partial_update": ("dsched.change_schedule",),
    "destroy": ("dsched.cancel_schedule",),  # DELETE cancels
    "pause": ("dsched.pause_schedule",),
    "resume": ("dsched.pause_schedule",),
    "trigger": ("dsched.trigger_schedule",),
    "backfill": ("dsched.trigger_schedule",),  # fires past slots, as run now fires one
    "bulk_create": ("dsched.add_schedule",),
    "bulk_cancel": ("dsched.cancel_schedule",),
}
OUTBOX: Mapping[str, tuple[str, ...]] = {
    "list": VIEW_OUTBOX,
    "retrieve": VIEW_OUTBOX,
    "retry": ("dsched.retry_outboxmessage",),
    "discard": ("dsched.discard_outboxmessage",),
}
CLUSTER: Mapping[str, tuple[str, ...]] = {"retrieve": VIEW_CLUSTER}

# An edit that leaves a schedule without a future fire is a cancel in effect; one that
# makes it due at once is a run now: they need those permissions too.
ENDS_IT = "dsched.cancel_schedule"
FIRES_IT = "dsched.trigger_schedule"


class ActionPermission(BasePermission):
    """The permission the view's table names for its current action (none: refused)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False
        table: Mapping[str, tuple[str, ...]] = view.permission_table
        needed = table.get(getattr(view, "action", None) or "", ())
        return any(user.has_perm(permission) for permission in needed)
