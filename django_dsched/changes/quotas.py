"""The quota of live schedules per host (tenant), checked by every create.

A host's quota is its row of ``tenant_quota_t`` (:class:`~django_dsched.models.TenantQuota`;
an empty ``max_active_schedules`` there means no limit), else
``DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES`` (None: no limit). What counts is every schedule of the
host that can still fire (:data:`~django_dsched.enums.LIVE`): ``ACTIVE``, ``PAUSED`` and
``SET_ASIDE`` (completed and cancelled ones never come back). So a pause frees no place and
a resume takes none: only creates add to the count, and only creates are checked (single and
bulk, which the Python API, the declarations, REST and the admin all go through).

A new tenant gets limits by default: a host other than ``DSCHED_DEFAULT_HOST_ID`` (the
operator's own) that has no row is given one, ``DSCHED_TENANT_MAX_ACTIVE_SCHEDULES`` and
``DSCHED_TENANT_MAX_FIRES_PER_SECOND``, by the create that finds it without (under its lock,
in that create's transaction). From then on the row is the tenant's quota, read by the fire
path as any other (:mod:`django_dsched.firing.throttle`): the fire path itself is unchanged,
and a project with one host never writes a row.

Concurrent creates of one host are serialised by a transaction-level advisory lock on the
host, taken only when a quota applies: the lock, then the count (a statement of its own, so
its snapshot is taken once the lock is held and sees every create committed before), then
the insert, all in one transaction; the lock is released at its commit. Two sessions at the
limit therefore never both get the last place. A host without a quota costs nothing more
than a lookup in this process's memory (:data:`DSCHED_QUOTA_CACHE_SECONDS`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import connections
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils.translation import gettext as _

from django_dsched.conf import app_settings
from django_dsched.enums import LIVE
from django_dsched.exceptions import QuotaExceeded
from django_dsched.models import TenantQuota
from django_dsched.models.schedule import resolve_host

# Advisory locks of quotas are pg_advisory_xact_lock(LOCK_CLASS, hashtext(host)): their own
# class, so they never meet another lock of the database's. Two hosts whose hashes collide
# only wait for each other.
LOCK_CLASS = 0x64737100  # "dsq\0"
LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s::text))"
# The host's row (its limit, possibly NULL), or nothing: then the default applies.
LIMIT = "SELECT max_active_schedules FROM tenant_quota_t WHERE host_id = %s"
# The row a new tenant is given (DSCHED_TENANT_MAX_*); one written meanwhile stays.
GIVE = """INSERT INTO tenant_quota_t (host_id, max_active_schedules, max_fires_per_second)
          VALUES (%s, %s, %s) ON CONFLICT (host_id) DO NOTHING"""
# The host's live schedules, counted up to ``LIMIT``: the cost follows the host's schedules
# up to the quota (through the (host_id, schedule_name) index), not the table.
COUNT = """SELECT count(*) FROM (SELECT 1 FROM schedule_t
                                 WHERE host_id = %s AND state = ANY(%s::text[])
                                 LIMIT %s) AS live"""

# Hosts known to have no quota of live schedules, and until when (monotonic): their creates
# skip the lock and the count. Bounded; emptied when a quota or the default changes here.
_unlimited: dict[uuid.UUID, float] = {}
_unlimited_lock = threading.Lock()
_CACHE_MAX = 10_000


def _database() -> Any:
    return connections[app_settings.DATABASE]


def _row(host_id: uuid.UUID) -> tuple[bool, int | None]:
    """Whether ``host_id`` has a row, and its limit of live schedules (None: none)."""
    with _database().cursor() as cursor:
        cursor.execute(LIMIT, [host_id])
        row = cursor.fetchone()
    return (False, None) if row is None else (True, row[0])


def gets_a_row(host_id: uuid.UUID) -> bool:
    """Whether ``host_id``, without a row, is given one at its next create (a tenant: not
    DSCHED_DEFAULT_HOST_ID, and a tenant limit is set)."""
    return resolve_host(host_id) != resolve_host(None) and (
        app_settings.TENANT_MAX_ACTIVE_SCHEDULES is not None
        or app_settings.TENANT_MAX_FIRES_PER_SECOND is not None
    )


def tenant_limits() -> tuple[int | None, float | None]:
    """A new tenant's row: its most live schedules and fires per second."""
    return app_settings.TENANT_MAX_ACTIVE_SCHEDULES, app_settings.TENANT_MAX_FIRES_PER_SECOND


def unlisted_limit(host_id: uuid.UUID) -> int | None:
    """The quota of live schedules of ``host_id`` while it has no row: a new tenant's
    (DSCHED_TENANT_MAX_ACTIVE_SCHEDULES, its row written at its next create), else the
    default (DSCHED_DEFAULT_MAX_ACTIVE_SCHEDULES)."""
    limit: int | None = (
        app_settings.TENANT_MAX_ACTIVE_SCHEDULES
        if gets_a_row(host_id)
        else app_settings.DEFAULT_MAX_ACTIVE_SCHEDULES
    )
    return limit


def may_apply(host_id: uuid.UUID) -> bool:
    """Whether a quota may apply to ``host_id``'s creates (False only when known, recently,
    to have none): one read of its row at most every DSCHED_QUOTA_CACHE_SECONDS. A tenant
    to be given a row is not known to have none."""
    if app_settings.DEFAULT_MAX_ACTIVE_SCHEDULES is not None:
        return True
    now = time.monotonic()
    until = _unlimited.get(host_id)
    if until is not None and until > now:
        return False
    found, limit = _row(host_id)
    if limit is not None or (not found and gets_a_row(host_id)):
        return True
    with _unlimited_lock:
        if len(_unlimited) >= _CACHE_MAX:
            _unlimited.clear()
        _unlimited[host_id] = now + float(app_settings.QUOTA_CACHE_SECONDS)
    return False


def forget() -> None:
    """Forget which hosts have no quota (a quota or the default changed)."""
    with _unlimited_lock:
        _unlimited.clear()


@receiver(post_save, sender=TenantQuota)
@receiver(post_delete, sender=TenantQuota)
def _quota_changed(**kwargs: Any) -> None:
    forget()


def room(
    host_id: uuid.UUID, adding: int, *, counted: bool = False, record: bool = True
) -> QuotaExceeded | None:
    """Check that ``host_id`` may have ``adding`` more live schedules; the refusal if not.

    Takes the host's quota lock, held until the caller's transaction ends: call it inside
    the transaction that inserts (its commit lets the next create of the host count). With
    ``counted``, the ``adding`` schedules are already inserted in this transaction (a bulk
    call counts after its insert) and are part of the count. A new tenant's row
    (:func:`gets_a_row`) is written here, unless ``record`` is False (a form checking before
    it saves). Costs nothing unless a quota may apply (:func:`may_apply`)."""
    if adding <= 0 or not may_apply(host_id):
        return None
    with _database().cursor() as cursor:
        cursor.execute(LOCK, [LOCK_CLASS, host_id])
        found, limit = _row(host_id)  # under the lock: the quota as it is now
        if not found:
            limit = unlisted_limit(host_id)
            if record and gets_a_row(host_id):
                cursor.execute(GIVE, [host_id, *tenant_limits()])
        if limit is None:
            return None
        allowed = limit if counted else limit - adding
        if allowed < 0:
            return refusal(host_id, limit, adding)
        cursor.execute(COUNT, [host_id, list(LIVE), allowed + 1])
        (live,) = cursor.fetchone()
    return refusal(host_id, limit, adding) if live > allowed else None


def refusal(host_id: uuid.UUID, limit: int, adding: int) -> QuotaExceeded:
    """The error of a create past ``host_id``'s quota of ``limit`` live schedules."""
    if adding == 1:
        message = _(
            "Host %(host)s may have at most %(limit)d live schedules (active, paused or set "
            "aside) and has reached that quota: cancel one it no longer needs, or ask for a "
            "larger quota."
        )
    else:
        message = _(
            "Host %(host)s may have at most %(limit)d live schedules (active, paused or set "
            "aside): the %(adding)d this call creates would take it past that quota. Create "
            "fewer, cancel some it no longer needs, or ask for a larger quota."
        )
    return QuotaExceeded(
        message % {"host": host_id, "limit": limit, "adding": adding},
        host_id=host_id,
        limit=limit,
    )


def check_added(added: Mapping[uuid.UUID, int]) -> None:
    """After a bulk insert (in its transaction): raise :class:`QuotaExceeded` for the first
    host, in id order (the order its locks are taken, so two calls never deadlock on them),
    that the call took past its quota; ``added``: schedules inserted per host."""
    for host_id in sorted(added):
        refused = room(host_id, added[host_id], counted=True)
        if refused is not None:
            raise refused


__all__ = ["check_added", "forget", "gets_a_row", "may_apply", "refusal", "room"]
