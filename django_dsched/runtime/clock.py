"""The database's clock: the only "now" the scheduler trusts."""

from __future__ import annotations

from datetime import datetime

from django.db import connections

from django_dsched.conf import app_settings


def database_now() -> datetime:
    with connections[app_settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now: datetime = cursor.fetchone()[0]
    return now
