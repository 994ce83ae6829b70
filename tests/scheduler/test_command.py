from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_dsched.history import partitions
from django_dsched.history.partitions import ADVISORY_LOCK, DAYS_AHEAD, EVENTS, OUTBOX, day_of
from django_dsched.models import Event
from django_dsched.runtime import loops
from django_dsched.runtime.split_brain import HostWatch
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql
from tests.runtime.test_split_brain import SPLIT, A, B

pytestmark = pytest.mark.django_db(transaction=True)


def test_once_fires_what_is_due_and_exits(db_now):
    ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=1))
    out = StringIO()
    call_command("run_scheduler", once=True, instance_id="cli", stdout=out, verbosity=1)
    assert "Fired 3 schedule(s)." in out.getvalue()
    assert Event.objects.filter(metadata__instance_id="cli").count() == 3


@pytest.fixture
def no_days():
    """No day partitions (a deployment whose days nobody made: a cron of --once runs has
    no leader's history thread); the days migrate made are made again after the test."""
    for day in partitions.days():
        sql(f"DROP TABLE {partitions.partition(OUTBOX, day)}, {partitions.partition(EVENTS, day)}")
    yield
    partitions.make_ahead()


def test_once_makes_the_days_ahead_before_it_fires(no_days, db_now):
    ScheduleFactory.create_batch(2, start_ts=db_now() - timedelta(seconds=1))
    out = StringIO()
    call_command("run_scheduler", once=True, stdout=out, verbosity=1)
    today = sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]
    assert partitions.days() == [today + timedelta(days=n) for n in range(DAYS_AHEAD + 1)]
    assert f"Made the partitions of {today.isoformat()}, " in out.getvalue()
    assert "Fired 2 schedule(s)." in out.getvalue()
    # The fires went into their day's partition, not the default one.
    fired = Event.objects.filter(scheduled_ts__isnull=False).values_list("id", flat=True)
    assert len(fired) == 2
    for id_ in fired:
        [(where,)] = sql(f"SELECT tableoid::regclass::text FROM {EVENTS} WHERE id = %s", [id_])
        assert where == partitions.partition(EVENTS, day_of(id_))


def test_once_without_the_days_lock_warns_and_fires(no_days, db_now):
    """Another maker of the days holds their lock: --once gives each day up after the lock
    timeout, says so, and fires (into the default partition)."""
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    out, err = StringIO(), StringIO()
    with other_session() as other, other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK])
        call_command("run_scheduler", once=True, stdout=out, stderr=err, verbosity=1)
    assert "Could not make the partitions of " in err.getvalue()
    assert "(a lock); the next run makes them." in err.getvalue()
    assert "Fired 1 schedule(s)." in out.getvalue()
    assert partitions.days() == []


def test_max_iterations_bounds_the_loop():
    call_command("run_scheduler", max_iterations=2, poll_interval=0.05, verbosity=0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--batch-size", "0"],
        ["--batch-size", "lots"],
        ["--poll-interval", "-1"],
        ["--instance-id", ""],
        ["--once", "--max-iterations", "3"],
    ],
)
def test_bad_options_are_refused(argv):
    with pytest.raises(CommandError):
        call_command("run_scheduler", *argv, verbosity=0)


@pytest.mark.parametrize("command", ["run_scheduler", "run_relay"])
def test_once_during_a_split_brain_fires_nothing_and_fails(command, monkeypatch, db_now):
    """A --once run that stood by for two writable hosts says so in its exit status (a cron
    of --once runs hears of it), not only in the log. Its URL's hosts, a and b, both accept
    writes (a watch of them, its probes answered by hand)."""
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))

    def two_writable(params, interval, name):
        servers = {"a": A, "b": B}
        return HostWatch(
            {"host": "a,b", "port": "1,2"}, interval, name,
            prober=lambda params, host, port, timeout: servers[host],
        )  # fmt: skip

    monkeypatch.setattr(loops, "HostWatch", two_writable)
    said = f"stood by: two hosts of the database URL accept writes: {re.escape(SPLIT)}"
    with pytest.raises(CommandError, match=said):
        call_command(command, once=True, instance_id="cli", stdout=StringIO(), verbosity=1)
    assert Event.objects.count() == 0
