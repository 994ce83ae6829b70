"""The schema is ``dsched.0001_initial``, the only migration: the models' tables, indexes and
constraints (the quotas per tenant included), and by hand what models cannot say (the trigger
that wakes a sleeping leader)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader

from django_dsched import api
from django_dsched.scheduler.loop import WAKE_HORIZON, Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql

TRIGGER = "SELECT count(*) FROM pg_trigger WHERE tgname = 'dsched_schedule_changed'"


def notifications(session, seconds: float) -> list[str]:
    """The channels of the notifications ``session`` receives within ``seconds``."""
    return [n.channel for n in session.connection.notifies(timeout=seconds, stop_after=1)]


@pytest.mark.django_db
def test_the_migrations_and_nothing_missing_from_them():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    assert sorted(name for app, name in loader.disk_migrations if app == "dsched") == [
        "0001_initial",
    ]
    call_command("makemigrations", "dsched", check=True, dry_run=True, stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_inserting_a_due_schedule_wakes_a_listening_session(db_now):
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
        assert notifications(listener, 5) == ["dsched_schedules"]


@pytest.mark.django_db(transaction=True)
def test_the_fire_paths_own_writes_do_not_wake_it(db_now):
    """The fire path sets dsched.firing in its transaction: the leader does not wake itself."""
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        with transaction.atomic():
            sql("SELECT set_config('dsched.firing', 'on', true)")
            sql("UPDATE schedule_t SET next_run_ts = next_run_ts + interval '1 minute'")
        assert notifications(listener, 0.5) == []
        sql("UPDATE schedule_t SET next_run_ts = statement_timestamp()")
        assert notifications(listener, 5) == ["dsched_schedules"]


@pytest.mark.django_db(transaction=True)
def test_migrating_to_zero_and_back():
    call_command("migrate", "dsched", "zero", verbosity=0)
    tables = connection.introspection.table_names()
    assert not {"schedule_t", "event_store_t", "outbox_message_t"} & set(tables)
    assert sql("SELECT count(*) FROM pg_proc WHERE proname = 'dsched_notify_schedules'") == [(0,)]
    call_command("migrate", "dsched", verbosity=0)
    assert {"schedule_t", "event_store_t", "outbox_message_t", "scheduler_lock_t"} <= set(
        connection.introspection.table_names()
    )
    assert sql(TRIGGER) == [(1,)]


@pytest.mark.django_db(transaction=True)
def test_a_schedule_due_later_than_the_horizon_wakes_nobody(db_now):
    """A NOTIFY makes its transaction commit alone (a database-wide lock held through the
    commit's flush): a create due after WAKE_HORIZON does not send one, and the leader,
    which never sleeps longer than that, finds it at its next poll."""
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        ScheduleFactory(start_ts=db_now() + timedelta(seconds=WAKE_HORIZON + 5))
        assert notifications(listener, 0.5) == []
        ScheduleFactory(start_ts=db_now() + timedelta(seconds=WAKE_HORIZON - 5))
        assert notifications(listener, 5) == ["dsched_schedules"]


@pytest.mark.django_db(transaction=True)
def test_pausing_wakes_nobody_and_resuming_a_due_schedule_does(db_now):
    schedule = ScheduleFactory(
        start_ts=db_now() - timedelta(seconds=1), frequency_unit="SECONDS", frequency_time=5
    )
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        api.pause(schedule.pk)
        assert notifications(listener, 0.5) == []
        api.resume(schedule.pk)
        assert notifications(listener, 5) == ["dsched_schedules"]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_of_many_due_creates_notifies_once(db_now):
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        with transaction.atomic():
            ScheduleFactory.create_batch(50, start_ts=db_now() - timedelta(seconds=1))
            # Set by the first row's call: the other rows' WHEN is false, no call.
            assert sql("SELECT current_setting('dsched.notified', true)") == [("on",)]
        assert notifications(listener, 5) == ["dsched_schedules"]
        # Only for that transaction: the next one notifies again.
        assert sql("SELECT current_setting('dsched.notified', true)") in ([("",)], [(None,)])
        ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
        assert notifications(listener, 5) == ["dsched_schedules"]


@pytest.mark.django_db
def test_the_triggers_horizon_is_the_leaders_longest_sleep():
    definitions = sql(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname LIKE 'dsched_schedule_%'"
    )
    assert len(definitions) == 2
    for (definition,) in definitions:
        assert f"'00:00:{int(WAKE_HORIZON):02d}'::interval" in definition
    assert Scheduler(poll_interval=WAKE_HORIZON * 10).poll_interval == WAKE_HORIZON / 2
