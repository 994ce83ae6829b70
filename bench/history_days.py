"""The days of history a benchmark's database keeps: ``event_store_t`` and
``outbox_message_t`` have a partition per day (django_dsched/history/partitions.py), today's
and a week ahead on a new database, and as many days back as the retention keeps on one that
has run that long (45 by default). Statements that name these tables are planned over every
day, so a figure measured on a new database can flatter one that has run for weeks.

``keep(days)`` leaves exactly ``days`` past days (empty ones made, older ones dropped), so a
benchmark's ``--history-days 45`` measures a cluster at the default retention.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from django_dsched.history import partitions


def keep(days: int | None) -> int:
    """Make the past ``days`` days' partitions, drop the older ones (None: leave the days as
    they are); the partitions of ``outbox_message_t`` there are now (default included)."""
    if days is None:
        return count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")
        (today,) = cursor.fetchone()
    wanted = {today - timedelta(days=n) for n in range(1, days + 1)}
    for day in partitions.days():
        if day < today and day not in wanted:
            with connection.cursor() as cursor:
                for table in partitions.TABLES:
                    cursor.execute(f"DROP TABLE IF EXISTS {partitions.partition(table, day)}")
    for day in sorted(wanted - set(partitions.days())):
        partitions.make_day(day)
    return count()


def count() -> int:
    """The partitions of ``outbox_message_t`` (the default one included)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_message_t'::regclass"
        )
        (count,) = cursor.fetchone()
    return int(count)
