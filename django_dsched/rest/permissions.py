"""Who may call what: each endpoint needs a capability of
:mod:`django_dsched.changes.permissions`, the one rule the admin, the Python API and the
commands ask too (``user.has_perm``, so groups, superusers and custom backends work as in
the admin). Seeing is the admin's view permission; each action needs the permission of the
admin action that does the same thing. What an action fires beyond that (a resume that
catches up, a create with a backlog, an edit that makes a schedule due) is checked by the
services themselves, with the same capability.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from django_dsched.changes import permissions as rules
from django_dsched.changes.permissions import Capability

# {view's permission table: {action: the capability it needs}}
SCHEDULES: Mapping[str, Capability] = {
    "list": rules.VIEW,
    "retrieve": rules.VIEW,
    "preview": rules.VIEW,
    "dry_run": rules.VIEW,
    "events": rules.VIEW,
    "deliveries": rules.VIEW,
    "status_by_key": rules.VIEW,
    "create": rules.ADD,
    "update": rules.CHANGE,
    "partial_update": rules.CHANGE,
    "destroy": rules.CANCEL,  # DELETE cancels
    "pause": rules.PAUSE,
    "resume": rules.PAUSE,  # with catch_up also FIRE (the view checks it first)
    "trigger": rules.FIRE,
    "backfill": rules.FIRE,  # fires past slots, as run now fires one
    "bulk_create": rules.ADD,
    "bulk_cancel": rules.CANCEL,
}
OUTBOX: Mapping[str, Capability] = {
    "list": rules.VIEW_OUTBOX,
    "retrieve": rules.VIEW_OUTBOX,
    "retry": rules.RETRY,
    "discard": rules.DISCARD,
}
CLUSTER: Mapping[str, Capability] = {"retrieve": rules.VIEW_CLUSTER}
CALENDARS: Mapping[str, Capability] = {
    "list": rules.VIEW_CALENDARS,
    "retrieve": rules.VIEW_CALENDARS,
    "create": rules.ADD_CALENDARS,
    "update": rules.CHANGE_CALENDARS,
    "partial_update": rules.CHANGE_CALENDARS,
    "destroy": rules.DELETE_CALENDARS,
}


class ActionPermission(BasePermission):
    """The capability the view's table names for its current action (none: refused)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        table: Mapping[str, Capability] = view.permission_table
        needed = table.get(getattr(view, "action", None) or "")
        return needed is not None and rules.allows(request.user, needed)
