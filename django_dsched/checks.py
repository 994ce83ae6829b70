"""System checks. IDs are stable and documented in docs/reference.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import connections

from .conf import app_settings


@register(Tags.database, Tags.compatibility)
def check_database(**kwargs: Any) -> list[Error]:
    alias = app_settings.DATABASE
    if alias not in connections.settings:
        return [
            Error(
                f"DSCHED_DATABASE names the database alias {alias!r}, which is not in DATABASES.",
                id="dsched.E001",
            )
        ]
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return [
            Error(
                f"django-dsched needs PostgreSQL; the database {alias!r} is {vendor}.",
                hint=(
                    "Leader election and firing rely on SELECT ... FOR UPDATE SKIP LOCKED, "
                    "advisory locks and LISTEN/NOTIFY, which SQLite and the other backends "
                    "lack. Point DSCHED_DATABASE at a PostgreSQL database."
                ),
                id="dsched.E002",
            )
        ]
    return []


@register(Tags.compatibility)
def check_settings(**kwargs: Any) -> list[Error]:
    errors = []
    if not settings.USE_TZ:
        errors.append(
            Error(
                "django-dsched needs USE_TZ = True: schedule times are instants.",
                id="dsched.E003",
            )
        )
    lease, heartbeat = app_settings.LEASE_SECONDS, app_settings.HEARTBEAT_SECONDS
    if not (isinstance(heartbeat, int | float) and heartbeat > 0 and lease >= 2 * heartbeat):
        errors.append(
            Error(
                f"DSCHED_LEASE_SECONDS ({lease}) must be at least twice "
                f"DSCHED_HEARTBEAT_SECONDS ({heartbeat}), and both positive.",
                hint="A leader renews its lease every heartbeat; two missed beats end it.",
                id="dsched.E004",
            )
        )
    for name in ("POLL_INTERVAL", "STANDBY_INTERVAL"):
        value = getattr(app_settings, name)
        if not (isinstance(value, int | float) and value > 0):
            errors.append(Error(f"DSCHED_{name} must be a positive number.", id="dsched.E005"))
    batch = app_settings.BATCH_SIZE
    if not (isinstance(batch, int) and 1 <= batch <= 10_000):
        errors.append(
            Error("DSCHED_BATCH_SIZE must be a whole number from 1 to 10000.", id="dsched.E006")
        )
    return errors
