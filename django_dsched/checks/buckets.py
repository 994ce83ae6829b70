"""The bucket settings (dsched.E020 to E022, reported by ``check_settings``) and, with
``--database``, agreement with the bucket count of the cluster in the database (dsched.E023,
W020)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from django_dsched.cluster.bucket_count import LIVE_LEASES, stored_bucket_count
from django_dsched.cluster.buckets import LOCK_STRIDE, MAX_BUCKETS, is_valid_count
from django_dsched.conf import app_settings


def bucket_setting_errors() -> list[Error]:
    errors = []
    count, replicas = app_settings.BUCKETS, app_settings.REPLICAS
    if not is_valid_count(count):
        errors.append(
            Error(
                f"DSCHED_BUCKETS ({count!r}) must be a power of two from 1 to {MAX_BUCKETS}.",
                hint="Every instance of a cluster must use the same count.",
                id="dsched.E020",
            )
        )
    if not (isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 1):
        errors.append(
            Error("DSCHED_REPLICAS must be a whole number, at least 1.", id="dsched.E021")
        )
    lease_id = app_settings.LEASE_ID
    if not (isinstance(lease_id, int) and 0 <= lease_id < LOCK_STRIDE):
        errors.append(
            Error(
                f"DSCHED_LEASE_ID ({lease_id!r}) must be a whole number from 0 to "
                f"{LOCK_STRIDE - 1}.",
                hint="Bucket b's lease row is DSCHED_LEASE_ID + b * 65536.",
                id="dsched.E022",
            )
        )
    return errors


@register(Tags.database)
def check_bucket_count(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: DSCHED_BUCKETS agrees with the count the cluster in the database
    runs with (a live cluster with another count refuses this instance)."""
    alias = app_settings.DATABASE
    if not databases or alias not in databases or not is_valid_count(app_settings.BUCKETS):
        return []
    try:
        stored = stored_bucket_count(alias, app_settings.LEASE_ID)
        if stored is None or stored == app_settings.BUCKETS:
            return []
        with connections[alias].cursor() as cursor:
            cursor.execute(
                LIVE_LEASES,
                {
                    "base": app_settings.LEASE_ID,
                    "stride": 1 << 16,
                    "lease": float(app_settings.LEASE_SECONDS),
                },
            )
            (live,) = cursor.fetchone()
    except DatabaseError:
        return []  # not migrated yet, or unreachable: other checks say so
    hint = (
        "Every instance of a cluster must use the same DSCHED_BUCKETS. To change it, stop "
        "every scheduler, wait one lease, then start them all with the new count."
    )
    if live:
        return [
            Error(
                f"DSCHED_BUCKETS is {app_settings.BUCKETS} but the running cluster in the "
                f"database uses {stored} bucket(s): run_scheduler would refuse to start.",
                hint=hint,
                id="dsched.E023",
            )
        ]
    return [
        Warning(
            f"DSCHED_BUCKETS is {app_settings.BUCKETS} but the cluster in the database last "
            f"ran with {stored} bucket(s); the next run_scheduler will switch it (no "
            "scheduler is running now).",
            hint=hint,
            id="dsched.W020",
        )
    ]
