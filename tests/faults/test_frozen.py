"""A peer's session frozen (a real SIGSTOP of a process) inside each kind of transaction of
ours that takes locks others wait on: the others keep firing and delivering, and the frozen
holder's locks go within the stated bound (``runtime.loops.hold_bounds``: half a lease after
its last statement), with no election.

The loops are driven in-process, a round at a time, on this thread; only the frozen peer is
a process (tests/faults/peer.py stops itself right after the chosen statement).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import FrequencyUnit
from django_dsched.history import event_ids, partitions
from django_dsched.models import Event
from django_dsched.outbox.relay import Relay
from django_dsched.runtime.clock import database_now
from django_dsched.runtime.loops import LOCK_WAIT_RETRY, hold_bounds
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.faults.harness import drive_all, elections, frozen_peer, longest_gaps
from tests.helpers import backend_gone, sql
from tests.integration.test_cluster import check_every_slot_fired_once_in_both_tables

pytestmark = pytest.mark.django_db(transaction=True)


def bound() -> float:
    """How long a frozen holder can hold its locks (seconds), plus what a waiting statement
    of a loop adds: one lock wait given up and the retry after it."""
    bounds = hold_bounds()
    idle = int(bounds["idle_in_transaction_session_timeout"]) / 1000
    return idle + int(bounds["lock_timeout"]) / 1000 + LOCK_WAIT_RETRY


def today():
    return database_now().date()


def expired_day():
    """A day past the retention, made by hand (drop days drops it)."""
    day = today() - timedelta(days=50)
    partitions.make_day(day)
    return day


def missing_day():
    """The last day made ahead, dropped by hand (make days makes it again)."""
    day = today() + timedelta(days=partitions.DAYS_AHEAD)
    partitions.make_ahead()
    sql(
        f"DROP TABLE {partitions.partition(partitions.OUTBOX, day)},"
        f" {partitions.partition(partitions.EVENTS, day)}"
    )
    return day


def expired_message_in_the_default_partition():
    """A fire delivered 60 days ago whose day has no partition: retention deletes it row by
    row from the default partitions."""
    ScheduleFactory(start_ts=database_now() - timedelta(days=60), schedule_name="old")
    sql(
        "WITH e AS (INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,"
        "   aggregate_version, event_type, event_ts, payload, metadata)"
        f" SELECT {event_ids.change_sql('start_ts')}, host_id, schedule_id, 'Schedule', 2,"
        "   event_type, start_ts, '{}', '{}' FROM schedule_t WHERE schedule_name = 'old'"
        "   RETURNING *)"
        " INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,"
        "   aggregate_version, event_type, event_ts, topic, status, delivered_ts)"
        " SELECT id, host_id, aggregate_id, aggregate_type, aggregate_version, event_type,"
        "   event_ts, 'reports', 'DELIVERED', event_ts FROM e"
    )
    assert sql("SELECT count(*) FROM outbox_message_t_default")[0][0] == 1


# Each kind of maintenance transaction, the statement after which its process stops, and
# the setup that gives it something to do.
MAINTENANCE = {
    # purge_history dropping a day: ACCESS EXCLUSIVE on both history tables (the DETACH).
    "drop a day": (r"^\s*LOCK TABLE ONLY", expired_day, ("command", "purge_history")),
    # run_scheduler --once making a day: ACCESS EXCLUSIVE on the default partitions.
    "make a day": (
        r"^\s*LOCK TABLE outbox_message_t_default",
        missing_day,
        ("command", "run_scheduler", "--once"),
    ),
    # purge_history moving the history's horizon first (its row: backfills wait on it).
    "move the horizon": (
        r"INSERT INTO history_horizon_t",
        expired_day,
        ("command", "purge_history"),
    ),
    # The retention pass deleting the default partitions' expired rows (its row locks).
    "delete expired rows": (
        r"^\s*DELETE FROM outbox_message_t_default",
        expired_message_in_the_default_partition,
        ("call", "django_dsched.outbox.retention.purge_expired"),
    ),
}


@pytest.mark.parametrize("kind", MAINTENANCE)
def test_a_frozen_maintenance_session_holds_fires_and_claims_at_most_the_bound(
    db_now, tmp_path, delivered, kind
):
    stop_after, setup, command = MAINTENANCE[kind]
    healthy = ScheduleFactory.create_batch(
        4, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    setup()
    scheduler, relay = Scheduler(instance_id="survivor"), Relay(instance_id="relay")
    scheduler._retention_wanted = False  # the peer is the one doing the upkeep
    loops = [scheduler, relay]
    try:
        drive_all(loops, 10, until=lambda: len(delivered) >= len(healthy))
        before = elections()
        with frozen_peer(tmp_path / "peer.log", stop_after, *command) as peer:
            pid = peer.wait_frozen()
            frozen_at = database_now()
            drive_all(loops, 10, until=lambda: backend_gone(pid))
            # Its session ended while it stays stopped: the server ended it, with its locks.
            assert peer.stopped() and backend_gone(pid), peer.output()
            gone_at = database_now()
            drive_all(loops, 2.5)
            until = database_now()
        output = peer.output()
    finally:
        for loop in loops:
            loop.shutdown()
    held = (gone_at - frozen_at).total_seconds()
    worst = max(longest_gaps(healthy, frozen_at, until).values())
    print(f"\n{kind}: locks held {held:.2f} s after the freeze; longest gap {worst:.2f} s")
    assert held <= bound(), output
    # Fires went on within the bound (1 s schedules: one period plus the bound at most)...
    assert worst <= 1 + bound(), output
    # ... and so did deliveries: every fire before the last second is delivered.
    fired = set(
        Event.objects.filter(
            scheduled_ts__isnull=False, event_ts__lt=until - timedelta(seconds=1)
        ).values_list("id", flat=True)
    )
    assert {str(i) for i in fired} <= set(delivered)
    assert len(delivered) == len(set(delivered))
    assert (elections(), scheduler.stats.leaderships) == (before, 1), output
    check_every_slot_fired_once_in_both_tables()


def test_a_peer_frozen_while_it_agrees_on_the_bucket_count_holds_no_lease_past_the_bound(
    db_now, tmp_path
):
    """An instance started with another bucket count locks the lease table (EXCLUSIVE) to
    compare the counts; frozen there, every renewal and fence of the cluster waits on it,
    half a lease at most: the leader keeps its lease and fires on."""
    healthy = ScheduleFactory.create_batch(
        4, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    scheduler = Scheduler(instance_id="survivor")
    scheduler._retention_wanted = False
    try:
        drive_all([scheduler], 10, until=lambda: scheduler.stats.fired >= len(healthy))
        before = elections()
        with frozen_peer(
            tmp_path / "peer.log",
            r"^LOCK TABLE scheduler_lock_t",
            "command",
            "run_scheduler",
            "--once",
            env={"DSCHED_TEST_BUCKETS": "2"},
        ) as peer:
            pid = peer.wait_frozen()
            frozen_at = database_now()
            drive_all([scheduler], 10, until=lambda: backend_gone(pid))
            assert peer.stopped() and backend_gone(pid), peer.output()
            gone_at = database_now()
            drive_all([scheduler], 2.5)
            until = database_now()
        output = peer.output()
    finally:
        scheduler.shutdown()
    assert (gone_at - frozen_at).total_seconds() <= bound(), output
    assert max(longest_gaps(healthy, frozen_at, until).values()) <= 1 + bound(), output
    assert (elections(), scheduler.stats.leaderships) == (before, 1), output
    check_every_slot_fired_once_in_both_tables()


# A peer frozen inside a transaction of the write side: a create holding its host's quota
# lock, an edit holding its schedule's row lock (a view's or a form's transaction).
WRITE_SIDE = {
    "a create holding its host's quota lock": (r"pg_advisory_xact_lock", "create_for_the_host"),
    "an edit holding its row": (r"FOR UPDATE", "edit_in_a_transaction"),
}


@pytest.mark.parametrize("kind", WRITE_SIDE)
def test_a_peer_frozen_in_the_write_side_holds_only_what_it_writes(db_now, tmp_path, kind):
    """The others fire on at their cadence and other hosts create at once; the frozen
    holder's own row (or its host's creates) wait for its transaction, the caller's: bound
    it with the role's idle_in_transaction_session_timeout (docs/design.md)."""
    stop_after, call = WRITE_SIDE[kind]
    host = uuid.uuid4()
    sql("INSERT INTO tenant_quota_t (host_id, max_active_schedules) VALUES (%s, 10)", [host])
    healthy = ScheduleFactory.create_batch(
        4, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    [held] = ScheduleFactory.create_batch(
        1,
        schedule_name="held",
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        start_ts=db_now(),
    )
    scheduler = Scheduler(instance_id="survivor")
    scheduler._retention_wanted = False
    try:
        drive_all([scheduler], 10, until=lambda: scheduler.stats.fired >= 5)
        before = elections()
        with frozen_peer(
            tmp_path / "peer.log",
            stop_after,
            "call",
            f"tests.faults.peer_calls.{call}",
            env={"DSCHED_FAULT_HOST": str(host)},
        ) as peer:
            peer.wait_frozen()
            frozen_at = database_now()
            started = time.monotonic()
            api.create_interval(
                every=1,
                unit="MINUTES",
                topic="reports",
                event_type="report.build",
                host_id=uuid.uuid4(),
            )
            assert time.monotonic() - started < 1.0
            drive_all([scheduler], 2.5)
            until = database_now()
        output = peer.output()
    finally:
        scheduler.shutdown()
    assert max(longest_gaps(healthy, frozen_at, until).values()) <= 1.5, output
    if kind == "an edit holding its row":
        assert longest_gaps([held], frozen_at, until)[held.pk] >= 2  # it waited, alone
    assert (elections(), scheduler.stats.leaderships) == (before, 1), output
    check_every_slot_fired_once_in_both_tables()
