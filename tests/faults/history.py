"""History written by hand for the upkeep's cells: a day past the retention, a day ahead
missing, delivered fires in a day or in the default partitions."""

from __future__ import annotations

from datetime import date, timedelta

from django_dsched.history import event_ids, partitions
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory
from tests.helpers import sql


def today() -> date:
    return database_now().date()


def expired_day(days_ago: int = 50) -> date:
    """A day past the retention (45 days), made by hand: dropping days drops it."""
    day = today() - timedelta(days=days_ago)
    partitions.make_day(day)
    return day


def missing_days(*ahead: int) -> list[date]:
    """Days made ahead (``ahead`` days from today), dropped by hand: making days makes them
    again."""
    partitions.make_ahead()
    found = [today() + timedelta(days=n) for n in ahead]
    for day in found:
        sql(
            f"DROP TABLE {partitions.partition(partitions.OUTBOX, day)},"
            f" {partitions.partition(partitions.EVENTS, day)}"
        )
    return found


def missing_day() -> date:
    """The last day made ahead, dropped by hand."""
    return missing_days(partitions.DAYS_AHEAD)[0]


def delivered_fires(day: date, count: int, **message_columns: str) -> list[str]:
    """``count`` fires of ``day`` (an event and its message, delivered that day), written
    by hand; in the day's partitions, or the default ones when the day has none. Their
    ids. ``message_columns``: SQL expressions for the messages' other columns."""
    schedule = ScheduleFactory(start_ts=database_now() - timedelta(days=90))
    at = f"'{day.isoformat()} 12:00:00+00'::timestamptz"
    set_by_us = {"status": "'DELIVERED'", "delivered_ts": "event_ts"}
    message_columns = {**set_by_us, **message_columns}
    columns = "".join(f", {name}" for name in message_columns)
    values = "".join(f", {expression}" for expression in message_columns.values())
    rows = sql(
        "WITH e AS (INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,"
        "   aggregate_version, event_type, event_ts, payload, metadata)"
        f" SELECT {event_ids.change_sql(at)}, s.host_id, s.schedule_id, 'Schedule', 1 + n,"
        f"   s.event_type, {at}, '{{}}', '{{}}'"
        "   FROM schedule_t s, generate_series(1, %s) AS n WHERE s.schedule_id = %s"
        "   RETURNING *)"
        " INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,"
        f"   aggregate_version, event_type, event_ts, topic{columns})"
        " SELECT id, host_id, aggregate_id, aggregate_type, aggregate_version, event_type,"
        f"   event_ts, 'reports'{values} FROM e RETURNING id",
        [count, schedule.pk],
    )
    return [str(row[0]) for row in rows]


def exists(ids: list[str]) -> int:
    """How many of ``ids`` are still in the outbox."""
    return int(sql("SELECT count(*) FROM outbox_message_t WHERE id = ANY(%s::uuid[])", [ids])[0][0])


def has_day(day: date) -> bool:
    return day in partitions.days()
