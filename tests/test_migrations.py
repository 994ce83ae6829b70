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
        sql("UPDATE schedule_t SET next_run_ts = next_run_ts + interval '1 minute'")
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
