"""The database django-dsched runs on: its alias and vendor (dsched.E001, E002), and
prepared creates through a transaction pooler (dsched.W002)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from django_dsched.conf import app_settings


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


@register(Tags.compatibility, Tags.database)
def check_prepared_creates(**kwargs: Any) -> list[CheckMessage]:
    """DSCHED_PREPARE_CREATES with a database entry set up for a transaction pooler
    (DISABLE_SERVER_SIDE_CURSORS, docs/pgbouncer.md): PgBouncer < 1.21 cannot carry a
    prepared statement from one transaction to the next, and 1.21 passes on to the server
    the DEALLOCATE ALL psycopg sends after a rollback (dsched.W002)."""
    entry = connections.settings.get(app_settings.DATABASE, {})
    if not app_settings.PREPARE_CREATES or not entry.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Warning(
            "DSCHED_PREPARE_CREATES is on, and the database entry looks like it goes through "
            "a transaction pooler (DISABLE_SERVER_SIDE_CURSORS).",
            hint=(
                "Behind PgBouncer older than 1.22, or without max_prepared_statements, "
                "prepared statements fail with 'prepared statement does not exist': turn "
                "DSCHED_PREPARE_CREATES off (docs/pgbouncer.md)."
            ),
            id="dsched.W002",
        )
    ]
