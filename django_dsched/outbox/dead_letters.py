"""Handling dead letters (DELIVERY_FAILED outbox messages): retry them or discard them.

The admin actions call these; so can operators' own code. Only dead letters are touched:
other rows in the queryset are counted as skipped.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.db.models import QuerySet

from django_dsched.conf import app_settings
from django_dsched.counts import ChangeCount
from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage


def retry(messages: QuerySet[OutboxMessage]) -> ChangeCount:
    """Make dead letters PENDING again with a fresh set of attempts; relays wake at once.

    ``last_error`` is kept until the next attempt replaces it; the phases of the failed run
    (picked, started, completed, failed) are cleared.
    """
    using = app_settings.DATABASE
    with transaction.atomic(using=using):
        total = messages.count()
        changed = (
            messages.using(using)
            .filter(status=DeliveryStatus.DELIVERY_FAILED)
            .update(
                status=DeliveryStatus.PENDING,
                attempts=0,
                next_attempt_ts=None,
                claimed_by="",
                claimed_until=None,
                # A new run: the old one's phases go (its error stays in last_error).
                picked_ts=None,
                started_ts=None,
                completed_ts=None,
                failed_ts=None,
            )
        )
        if changed:
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT pg_notify('dsched_outbox', '')")  # sent at commit
    return ChangeCount(changed, total - changed)


def discard(messages: QuerySet[OutboxMessage]) -> ChangeCount:
    """Delete dead letters (their events stay, and age out with retention)."""
    using = app_settings.DATABASE
    with transaction.atomic(using=using):
        total = messages.count()
        changed, _ = messages.using(using).filter(status=DeliveryStatus.DELIVERY_FAILED).delete()
    return ChangeCount(changed, total - changed)
