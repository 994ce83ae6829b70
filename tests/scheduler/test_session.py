"""What a loop leaves on its database session: only on a direct one, nothing on a pooled one.

The pooled side runs against a real PgBouncer in tests/integration/test_pgbouncer.py; here
the checks on a direct session, and the switches (DSCHED_LISTEN, DISABLE_SERVER_SIDE_CURSORS).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection

from django_dsched.models import Event, Lease
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import backend_gone, other_session, sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def own(query: str) -> list[tuple]:
    return sql(query, using=connection)


@pytest.fixture
def pooled_settings(monkeypatch):
    """The project says its connection goes through a transaction-mode pooler."""
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    yield
    connection.close()


def test_a_direct_session_is_named_listens_and_offers_its_pid(db_now):
    scheduler = Scheduler(instance_id="direct")
    scheduler._guarded(scheduler.step)
    try:
        assert scheduler.lease.is_leader
        assert not scheduler.pooled and scheduler.listening
        pid = own("SELECT pg_backend_pid()")[0][0]
        assert Lease.objects.get().holder_pid == pid
        assert own("SELECT current_setting('application_name')") == [("dsched:direct",)]
        assert sorted(own("SELECT pg_listening_channels()")) == [
            ("dsched_leader",),
            ("dsched_schedules",),
        ]
    finally:
        scheduler.shutdown()


def test_the_timeouts_and_no_jit_are_set_per_transaction_not_per_session(db_now):
    ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=5))
    scheduler = Scheduler(instance_id="local")
    try:
        scheduler._guarded(scheduler.step)
        assert Event.objects.count() == 3
        # The session keeps the server's defaults: a pooler would hand them to others. But no
        # JIT on a direct session, which is the loop's alone (pooled: below).
        assert own("SELECT current_setting('idle_in_transaction_session_timeout')") == [("0",)]
        assert own("SELECT current_setting('lock_timeout')") == [("0",)]
        assert own("SELECT current_setting('jit')") == [("off",)]
        with scheduler.transaction() as cursor:
            cursor.execute(
                "SELECT current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('lock_timeout'), current_setting('jit')"
            )
            # Half of DSCHED_LEASE_SECONDS (3 s in tests); a quarter of it, at most 1 s; and
            # no JIT: at 1,000,000 schedules compiling the claim took seconds (runtime.loops).
            assert cursor.fetchone() == ("1500ms", "750ms", "off")
    finally:
        scheduler.shutdown()


def test_a_leader_frozen_mid_transaction_loses_its_session_and_locks(db_now):
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    scheduler = Scheduler(instance_id="frozen")
    scheduler._guarded(scheduler.step)
    scheduler.lease.lease_seconds = 1.0  # the timeout is half the lease: 500 ms
    pid = own("SELECT pg_backend_pid()")[0][0]
    with pytest.raises(DatabaseError), scheduler.transaction() as cursor:
        cursor.execute("SELECT schedule_id FROM schedule_t FOR UPDATE")
        # Frozen here (SIGSTOP): the database ends the session after the timeout.
        with other_session() as observer:
            wait_for(
                lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid], observer),
                timeout=10,
                what="the session to be ended",
            )
        cursor.execute("SELECT 1")
    assert backend_gone(pid)
    scheduler._lost_connection()
    scheduler.shutdown()


def test_without_listen_the_loops_poll(settings):
    settings.DSCHED_LISTEN = False
    for loop in (Scheduler(instance_id="poll"), Relay(instance_id="poll")):
        loop._ensure_session()
        try:
            assert not loop.pooled and not loop.listening
            assert own("SELECT pg_listening_channels()") == []
            assert loop._pgconn() is None
            started = time.monotonic()
            loop.waker.wait(0.2, loop._pgconn())  # a plain timed sleep, still interruptible
            assert time.monotonic() - started >= 0.15
        finally:
            loop.shutdown()


def test_a_pooled_session_gets_no_session_state_and_offers_no_pid(pooled_settings, caplog):
    scheduler = Scheduler(instance_id="pooled")
    with caplog.at_level(logging.INFO, logger="django_dsched"):
        scheduler._guarded(scheduler.step)
    try:
        assert scheduler.lease.is_leader
        assert scheduler.pooled and not scheduler.listening
        assert own("SELECT pg_listening_channels()") == []
        assert own("SELECT current_setting('application_name')") != [("dsched:pooled",)]
        assert own("SELECT current_setting('jit')") == [("on",)]  # the server's default
        assert Lease.objects.get().holder_pid == 0
        assert "connects through a pooler: polling instead of LISTEN" in caplog.text
    finally:
        scheduler.shutdown()


def test_listen_can_be_forced_through_a_session_mode_pooler(pooled_settings, settings):
    settings.DSCHED_LISTEN = True
    relay = Relay(instance_id="session-mode")
    relay._ensure_session()
    try:
        assert relay.pooled and relay.listening
        assert own("SELECT pg_listening_channels()") == [("dsched_outbox",)]
    finally:
        relay.shutdown()


def test_a_leader_frozen_past_the_bound_says_so_in_one_line_and_goes_on(db_now, caplog):
    """A frozen leader resumed (SIGCONT) after the database ended its session logged
    "ERROR database error" with two tracebacks, for the bound doing its work; now one
    warning saying what happened, and the next round reconnects and fires."""
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    scheduler = Scheduler(instance_id="frozen")
    scheduler.lease.lease_seconds = 1.0  # the timeout is half the lease: 500 ms
    pid = own("SELECT pg_backend_pid()")[0][0]

    def frozen_round() -> float:
        with scheduler.transaction() as cursor:
            cursor.execute("SELECT schedule_id FROM schedule_t FOR UPDATE")
            with other_session() as observer:  # frozen here (SIGSTOP)
                wait_for(
                    lambda: (
                        not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid], observer)
                    ),
                    timeout=10,
                    what="the session to be ended",
                )
            cursor.execute("SELECT 1")  # SIGCONT
        return 0.0

    try:
        with caplog.at_level(logging.WARNING, logger="django_dsched"):
            scheduler._guarded(frozen_round)
        records = [r for r in caplog.records if "ended this session" in r.getMessage()]
        assert len(records) == 1 and records[0].levelno == logging.WARNING
        assert not any(r.levelno >= logging.ERROR or r.exc_info for r in caplog.records)
        assert "stood still in a transaction for longer than 500 ms" in records[0].getMessage()
        assert not scheduler.connected
        scheduler._guarded(scheduler.step)  # a new session; it leads and fires
        assert scheduler.connected and Event.objects.count() == 1
    finally:
        scheduler.shutdown()
