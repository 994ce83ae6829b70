"""Who may do what, at every door: one rule per capability, written here once.

A capability is something a user may do to schedules, messages or the cluster; it is
allowed by any one of a set of Django permissions (``user.has_perm``, so groups,
superusers and custom backends count, and an inactive user has none). The admin, the REST
API, the Python API (a user given as ``actor``) and the ``dsched`` command (``--user``) ask
these same capabilities; docs/api.md has the table of capability x door.

Firing is one capability wherever it comes from: run now, a backfill, a resume that
catches up on the slots missed while paused, a create that would fire a backlog at once,
and an edit that makes a schedule due at once all need :data:`FIRE`. The services check it
themselves (:func:`require`) when the actor is a user, so no door can forget it; an actor
that is not a user (code, ``"manage.py"``, the scheduler) is trusted, as code is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_dsched.enums import MisfirePolicy, ScheduleKind, ScheduleState
from django_dsched.exceptions import ConfigurationError, NotPermitted
from django_dsched.models import Schedule
from django_dsched.models.schedule import resolve_host


@dataclass(frozen=True)
class Capability:
    name: str
    permissions: tuple[str, ...]  # any one of these allows it

    @property
    def permission(self) -> str:
        """The permission to grant for it (the first)."""
        return self.permissions[0]


VIEW = Capability("view schedules", ("dsched.view_schedule", "dsched.change_schedule"))
ADD = Capability("create schedules", ("dsched.add_schedule",))
CHANGE = Capability("edit schedules", ("dsched.change_schedule",))
PAUSE = Capability("pause and resume schedules", ("dsched.pause_schedule",))
CANCEL = Capability("cancel schedules", ("dsched.cancel_schedule",))
FIRE = Capability("run schedules now", ("dsched.trigger_schedule",))
VIEW_OUTBOX = Capability(
    "view outbox messages", ("dsched.view_outboxmessage", "dsched.change_outboxmessage")
)
RETRY = Capability("retry dead letters", ("dsched.retry_outboxmessage",))
DISCARD = Capability("discard dead letters", ("dsched.discard_outboxmessage",))
VIEW_CLUSTER = Capability(
    "view the cluster", ("dsched.view_schedulerinstance", "dsched.change_schedulerinstance")
)
# Quotas per tenant (models.TenantQuota): cluster-wide limits, set in the admin only.
VIEW_QUOTAS = Capability(
    "view tenant quotas", ("dsched.view_tenantquota", "dsched.change_tenantquota")
)
ADD_QUOTAS = Capability("add tenant quotas", ("dsched.add_tenantquota",))
CHANGE_QUOTAS = Capability("change tenant quotas", ("dsched.change_tenantquota",))
DELETE_QUOTAS = Capability("delete tenant quotas", ("dsched.delete_tenantquota",))
# Business calendars (models.Calendar): a tenant's own, and the operator's, shared.
VIEW_CALENDARS = Capability("view calendars", ("dsched.view_calendar", "dsched.change_calendar"))
ADD_CALENDARS = Capability("add calendars", ("dsched.add_calendar",))
CHANGE_CALENDARS = Capability("change calendars", ("dsched.change_calendar",))
DELETE_CALENDARS = Capability("delete calendars", ("dsched.delete_calendar",))
CAPABILITIES = (
    VIEW,
    ADD,
    CHANGE,
    PAUSE,
    CANCEL,
    FIRE,
    VIEW_OUTBOX,
    RETRY,
    DISCARD,
    VIEW_CLUSTER,
    VIEW_QUOTAS,
    ADD_QUOTAS,
    CHANGE_QUOTAS,
    DELETE_QUOTAS,
    VIEW_CALENDARS,
    ADD_CALENDARS,
    CHANGE_CALENDARS,
    DELETE_CALENDARS,
)


def is_user(actor: Any) -> bool:
    """Whether ``actor`` is a user whose permissions count (not code's name for itself)."""
    return callable(getattr(actor, "has_perm", None))


def allows(user: Any, capability: Capability) -> bool:
    """Whether ``user`` (a user, anonymous or not) has ``capability``."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return any(user.has_perm(permission) for permission in capability.permissions)


def may(actor: Any, capability: Capability) -> bool:
    """Whether ``actor`` may: a user by its permissions; code always."""
    return not is_user(actor) or allows(actor, capability)


def sees_operations(user: Any) -> bool:
    """Whether ``user`` may see the operator's side of what it reads: the scheduler
    instances and relays (``instance_id``, ``claimed_by``), staff members' names in the
    history, and error texts from the operator's code, endpoints and database. That is the
    cluster's permission (:data:`VIEW_CLUSTER`): anyone else (a tenant) reads their own
    schedules with those left out or said in general words (docs/threat-model.md)."""
    return allows(user, VIEW_CLUSTER)


def reachable_hosts(values: Iterable[uuid.UUID | str], setting: str) -> list[uuid.UUID]:
    """The host ids a tenancy resolver (``setting``, its name) returned, each once and in
    order; anything that is not a host id is a :class:`ConfigurationError` naming it."""
    try:
        return list(dict.fromkeys(resolve_host(value) for value in values))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{setting} returned something that is not a host id: {exc}"
        ) from None


def refusal(capability: Capability, why: object = "") -> NotPermitted:
    """The error for a missing ``capability``; ``why`` says what asked for it."""
    needs = _("that needs the permission to %(capability)s (%(permission)s)") % {
        "capability": capability.name,
        "permission": capability.permission,
    }
    message = (
        f"{why}: {needs}."
        if why
        else _("This needs the permission to %(c)s (%(p)s).")
        % {
            "c": capability.name,
            "p": capability.permission,
        }
    )
    return NotPermitted(message, permission=capability.permission)


def require(actor: Any, capability: Capability, why: object = "") -> None:
    """Raise :class:`NotPermitted` if ``actor`` is a user without ``capability``."""
    if not may(actor, capability):
        raise refusal(capability, why)


# -- what fires -----------------------------------------------------------------------------

CATCH_UP_WHY = gettext_lazy(
    "Resuming with catch_up fires the slots missed while paused; resume without it to go "
    "on from now, or ask someone who may"
)
BACKLOG_WHY = gettext_lazy(
    "This schedule would fire a backlog at once (misfire policy CATCH_UP, and more than one "
    "of its slots since its start is already due); give a later start or another misfire "
    "policy, or ask someone who may"
)


def fires_a_backlog(schedule: Schedule, now: Callable[[], datetime]) -> bool:
    """Whether a new ``schedule`` (validated and placed) fires more than one slot as soon
    as it is created: only a catch-up (``CATCH_UP``) fires several slots at once, when a
    second slot since its start is already due. (Any new schedule may fire its first slot
    at once: that is what a start of now means.) ``now`` is called only if it matters."""
    if (
        schedule.state != ScheduleState.ACTIVE
        or schedule.misfire_policy != MisfirePolicy.CATCH_UP
        or schedule.catch_up_limit < 2
        or schedule.schedule_kind == ScheduleKind.ONCE
        or (schedule.max_fires is not None and schedule.max_fires < 2)
    ):
        return False
    try:
        second = schedule.timetable().slot_after(schedule.next_slot_ts)
    except Exception:  # the scheduler would set it aside: it fires nothing
        return False
    if second is None or (schedule.end_ts is not None and second > schedule.end_ts):
        return False
    return second <= now()


def check_new(actor: Any, schedule: Schedule, now: Callable[[], datetime]) -> None:
    """Refuse a new schedule that would fire a backlog, for a user who may not fire."""
    if not may(actor, FIRE) and fires_a_backlog(schedule, now):
        raise refusal(FIRE, BACKLOG_WHY)
