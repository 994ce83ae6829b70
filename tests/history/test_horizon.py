"""Exactly once holds against an operator's own commands (issue 38): a backfill, a run now or a
resume never fires a slot whose record a purge dropped.

``backfill`` once checked its range against ``DSCHED_RETENTION_DAYS``, not against what the
history still holds: after ``purge_history --days 1``, backfilling a day three days back fired
and delivered its 24 already-delivered hourly slots again (and the same after raising the
setting, or turning retention off). Every purge now first moves a durable horizon, "history
complete since", to its cutoff (in a transaction of its own, committed before anything is
deleted), and every door refuses a backfill that reaches before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from django_dsched import api
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.firing.on_demand import fire_on_demand
from django_dsched.history import horizon
from django_dsched.history.partitions import EVENTS, OUTBOX, make_day, partition
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.helpers import sql
from tests.rest.conftest import APIClient

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "ops", "event_type": "ping"}


def today() -> date:
    return sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


@pytest.fixture
def made_days() -> Iterator[list[date]]:
    made: list[date] = []
    yield made
    for day in made:
        for table in (OUTBOX, EVENTS):
            sql(f"DROP TABLE IF EXISTS {partition(table, day)}")


def delivered_day(day: date) -> Schedule:
    """An hourly schedule whose 24 slots of ``day`` fired then and were delivered then."""
    schedule = api.create_interval(
        "hourly", every=1, unit="HOURS", start=midnight(day) - timedelta(days=2), **COMMON
    )
    start = midnight(day)
    assert api.backfill(schedule, start, start + timedelta(hours=23)) == (24, 0)
    fired_on_time_and_delivered()
    return schedule


def fired_on_time_and_delivered() -> None:
    """Every fire as if the leader had fired its slot on time and the relay delivered it at
    once."""
    sql("UPDATE event_store_t SET event_ts = scheduled_ts WHERE scheduled_ts IS NOT NULL")
    sql(
        "UPDATE outbox_message_t SET event_ts = e.event_ts, status = 'DELIVERED',"
        " delivered_ts = e.event_ts + interval '1 second'"
        " FROM event_store_t e WHERE e.id = outbox_message_t.id"
    )


def fires_of(schedule: Schedule) -> int:
    return Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False).count()


def purge(days: float) -> str:
    out = StringIO()
    call_command("purge_history", "--days", str(days), stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("in_a_day_partition", [True, False], ids=["day dropped", "default"])
@pytest.mark.parametrize("retention", [45, 400, None], ids=["45 days", "raised", "off"])
def test_a_backfill_after_a_purge_never_fires_a_delivered_slot_again(
    settings, made_days, in_a_day_partition, retention
):
    day = today() - timedelta(days=3)
    if in_a_day_partition:
        make_day(day)
        made_days.append(day)
    schedule = delivered_day(day)
    purge(1)
    assert fires_of(schedule) == 0  # the records of those fires are gone
    settings.DSCHED_RETENTION_DAYS = retention

    start = midnight(day)
    with pytest.raises(ValidationError, match="purged") as refused:
        api.backfill(schedule, start, start + timedelta(hours=23))
    assert "history before" in str(refused.value)
    assert fires_of(schedule) == 0
    assert not OutboxMessage.objects.filter(status=DeliveryStatus.PENDING).exists()


def test_every_door_refuses_it_with_the_same_error(made_days):
    day = today() - timedelta(days=3)
    schedule = delivered_day(day)
    purge(1)
    start, end = midnight(day), midnight(day) + timedelta(hours=23)

    root = APIClient(User.objects.create_superuser("root", password="pw"))
    response = root.post(
        f"schedules/{schedule.pk}/backfill/",
        {"start": start.isoformat(), "end": end.isoformat()},
    )
    assert response.status_code == 400, response.body
    assert "purged" in str(response.body["errors"])

    with pytest.raises(CommandError, match="purged"):
        call_command(
            "dsched", "backfill", "hourly", "--start", start.isoformat(), "--end", end.isoformat()
        )
    assert fires_of(schedule) == 0


def test_the_part_after_the_horizon_can_still_be_backfilled(settings):
    now = sql("SELECT statement_timestamp()")[0][0]
    schedule = api.create_interval(
        "hourly", every=1, unit="HOURS", start=now - timedelta(days=4), **COMMON
    )
    purge(2)
    since = horizon.complete_since()
    assert since is not None and abs(since - (now - timedelta(days=2))) < timedelta(minutes=1)
    # A range reaching before the horizon fires nothing at all.
    with pytest.raises(ValidationError, match="purged"):
        api.backfill(schedule, since - timedelta(hours=3), since + timedelta(hours=3))
    assert fires_of(schedule) == 0
    fired, already = api.backfill(schedule, since + timedelta(minutes=1), now)
    assert fired > 40 and already == 0


def test_every_purge_moves_the_horizon_forward_never_back(settings):
    assert horizon.complete_since() is None  # nothing purged yet
    now = sql("SELECT statement_timestamp()")[0][0]
    purge(2)
    after_two = horizon.complete_since()
    assert after_two is not None and after_two > now - timedelta(days=2, minutes=1)
    purge(10)  # a longer retention does not bring the purged days back
    assert horizon.complete_since() == after_two
    purge(1)
    assert horizon.complete_since() > after_two
    # The leader's retention pass moves it too, with the setting's days.
    settings.DSCHED_RETENTION_DAYS = 0.5
    from django_dsched.outbox.retention import purge_expired

    purge_expired()
    assert horizon.complete_since() > now - timedelta(hours=12, minutes=1)


def test_the_horizon_is_committed_before_anything_is_deleted(made_days):
    """A purge whose deletes are refused (here every one: each refused row is left in place
    and logged) or whose process dies has already moved the horizon: the horizon may say
    less than the history holds, never more."""
    day = today() - timedelta(days=3)
    schedule = delivered_day(day)
    sql(
        "CREATE FUNCTION dsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'no deletes today'; END $$"
    )
    sql(
        "CREATE TRIGGER dsched_test_refuse BEFORE DELETE ON outbox_message_t_default"
        " FOR EACH ROW EXECUTE FUNCTION dsched_test_refuse()"
    )
    try:
        purge(1)
    finally:
        sql("DROP TRIGGER dsched_test_refuse ON outbox_message_t_default")
        sql("DROP FUNCTION dsched_test_refuse()")
    assert fires_of(schedule) == 24
    assert horizon.complete_since() is not None
    with pytest.raises(ValidationError, match="purged"):
        api.backfill(schedule, midnight(day), midnight(day) + timedelta(hours=23))


def test_the_fire_statement_itself_skips_slots_before_the_horizon(made_days):
    """The doors check first; the statement checks again under the horizon's row lock, so a
    purge that moves it meanwhile cannot let a slot through."""
    day = today() - timedelta(days=3)
    schedule = delivered_day(day)
    purge(1)
    from django.db import connection

    with connection.cursor() as cursor:
        done = fire_on_demand(
            cursor,
            schedule.schedule_id,
            [midnight(day) + timedelta(hours=5), midnight(today())],
            states=[ScheduleState.ACTIVE],
            trigger="backfill",
            actor="test",
            guard=True,
        )
    assert (done.found, done.fired, done.before_horizon) == (True, 0, True)
    assert fires_of(schedule) == 0
    version = Schedule.objects.get(pk=schedule.pk).aggregate_version
    assert version == schedule.aggregate_version + 24  # nothing written for this one


def test_run_now_after_a_purge_fires_once():
    schedule = api.create_interval("hourly", every=1, unit="HOURS", **COMMON)
    purge(0.0001)  # the horizon is now, less nine seconds
    assert api.trigger(schedule) == 1
    assert fires_of(schedule) == 1


def test_a_resume_with_catch_up_never_reaches_before_the_horizon(settings, made_days):
    """Paused three days ago; while paused, a backfill fired the first of its missed slots,
    which were delivered and purged. Resuming with catch-up leaves the slots before the
    horizon behind instead of firing the purged ones again."""
    day = today() - timedelta(days=3)
    schedule = api.create_interval(
        "hourly",
        every=1,
        unit="HOURS",
        start=midnight(day),
        misfire_policy="CATCH_UP",
        catch_up_limit=1000,
        **COMMON,
    )
    Schedule.objects.filter(pk=schedule.pk).update(
        state=ScheduleState.PAUSED,
        active=False,
        next_slot_ts=midnight(day),
        next_run_ts=midnight(day),
    )
    start = midnight(day)
    assert api.backfill(schedule, start, start + timedelta(hours=5)) == (6, 0)
    fired_on_time_and_delivered()
    purge(1)
    assert fires_of(schedule) == 0
    since = horizon.complete_since()

    api.resume(schedule, catch_up=True)

    schedule.refresh_from_db()
    assert schedule.next_slot_ts >= since
    Scheduler(instance_id="catch-up").run_until_idle()
    slots = Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
    assert slots.exists()
    assert not slots.filter(scheduled_ts__lt=since).exists()
