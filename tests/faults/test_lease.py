"""Heartbeats and leases (scheduler_lock_t, scheduler_instance_t): rows the database refuses
and rows holding values at the edges of their types. A refused presence row or bucket lease
row costs only itself; the one lease row of a cluster without buckets is the leadership
itself (no one can lead while the database refuses it: said in one error line, no election
churns)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.cluster.buckets import lock_id
from tests.faults.harness import (
    BIGINT_MAX,
    LAST_TIMESTAMP,
    drive,
    drive_all,
    elections,
    every_second,
    fire_times,
    leader,
    refusing,
    refusing_all,
    write_by_hand,
)
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def test_presence_rows_the_database_refuses(db_now, caplog):
    """The leader's row refused by a trigger, the standby's by a CHECK: the leader leads and
    fires on, the standby stands by, no election."""
    healthy = every_second(db_now() - timedelta(seconds=2), 5)
    first, second = leader("first"), leader("second")
    try:
        drive_all([first, second], 0.3)
        assert (first.lease.is_leader, second.lease.is_leader) == (True, False)
        before = elections()
        rules = [
            ("scheduler_instance_t", "{r}.instance_id = 'first'", "trigger"),
            ("scheduler_instance_t", "{r}.instance_id = 'second'", "check"),
        ]
        with refusing_all(rules):
            since = db_now()
            second._next_presence = 0  # a standby reports once a lease: now
            drive_all(
                [first, second],
                5,
                until=lambda: all(len(t) >= 2 for t in fire_times(healthy, since).values()),
            )
    finally:
        first.shutdown()
        second.shutdown()
    assert all(len(t) >= 2 for t in fire_times(healthy, since).values())
    assert (elections(), first.stats.leaderships, second.stats.leaderships) == (before, 1, 0)
    assert "presence row refused (RaiseException (P0001)" in caplog.text
    assert "presence row refused (CheckViolation (23514)" in caplog.text
    assert first.stats.db_errors == second.stats.db_errors == 0


def test_bucket_lease_rows_the_database_refuses(db_now, settings, caplog):
    """With buckets, the rows of buckets 2 (a CHECK) and 3 (a trigger) refused: the instance
    keeps buckets 0 and 1 and their schedules fire on; 2 and 3 are left, logged."""
    settings.DSCHED_BUCKETS = 4
    schedules = every_second(db_now() - timedelta(seconds=2), 24)
    kept = [s for s in schedules if s.bucket_key % 4 < 2]
    scheduler = leader()
    try:
        drive(scheduler, 0.5)
        assert sorted(scheduler.lease.held) == [0, 1, 2, 3]
        before = {b: e for b, e in scheduler.lease.held.items() if b < 2}
        rules = [
            ("scheduler_lock_t", f"{{r}}.lock_id = {lock_id(1, 2)}", "check"),
            ("scheduler_lock_t", f"{{r}}.lock_id = {lock_id(1, 3)}", "trigger"),
        ]
        with refusing_all(rules):
            drive(scheduler, 5, until=lambda: sorted(scheduler.lease.held) == [0, 1])
            since = db_now()
            drive(
                scheduler,
                5,
                until=lambda: all(len(t) >= 2 for t in fire_times(kept, since).values()),
            )
    finally:
        scheduler.shutdown()
    assert sorted(scheduler.lease.held or before) == [0, 1]
    assert all(len(t) >= 2 for t in fire_times(kept, since).values())
    # Buckets 0 and 1 never changed hands; 2 and 3 were refused, not taken and lost again.
    epochs = dict(sql("SELECT lock_id, epoch FROM scheduler_lock_t"))
    assert {b: epochs[lock_id(1, b)] for b in before} == before
    assert "refuses bucket 2's lease row (CheckViolation (23514)" in caplog.text
    assert "refuses bucket 3's lease row (RaiseException (P0001)" in caplog.text


def test_the_one_lease_row_refused_stops_leadership_without_churn(db_now, caplog):
    """Cannot hold: without buckets the cluster's one lease row is the leadership; while
    the database refuses it no one leads. It is said in one error line and no election
    churns (the epoch does not climb)."""
    every_second(db_now() - timedelta(seconds=2), 3)
    scheduler = leader()
    try:
        drive(scheduler, 0.3)
        before = elections()
        fired = scheduler.stats.fired
        with refusing("scheduler_lock_t", "{r}.lock_id = 1", "trigger"):
            drive(scheduler, 2)
    finally:
        scheduler.shutdown()
    assert elections() == before and not scheduler.lease.is_leader
    assert scheduler.stats.fired == fired
    assert "RaiseException" in caplog.text and "refused by the fault matrix" in caplog.text


def test_a_lease_row_at_the_edges_of_its_types(db_now):
    """A lease written by hand with a heartbeat of 'infinity' by a holder whose session says
    nothing (pid 0, as behind a pooler) holds nothing: an instance takes it at once."""
    healthy = every_second(db_now() - timedelta(seconds=2), 3)
    scheduler = leader()
    try:
        drive(scheduler, 0.3)
        scheduler.lease.step_down()  # a ghost holds it now:
        assert write_by_hand(
            "scheduler_lock_t",
            "lock_id",
            1,
            instance_id="'ghost'",
            last_heartbeat="'infinity'",
            holder_pid="0",
        )
        since = db_now()
        drive(scheduler, 3, until=lambda: all(fire_times(healthy, since).values()))
    finally:
        scheduler.shutdown()
    assert all(fire_times(healthy, since).values())
    assert scheduler.stats.leaderships == 2


def test_a_lease_epoch_at_the_largest_bigint_cannot_be_taken(db_now, caplog):
    """Cannot hold: a fencing token must grow, and none is larger than the largest bigint;
    the take is refused (out of range), said in the log, and nothing churns."""
    every_second(db_now() - timedelta(seconds=2), 3)
    sql(
        "INSERT INTO scheduler_lock_t (lock_id, instance_id, epoch, last_heartbeat,"
        " acquired_ts, holder_pid, buckets) VALUES (1, 'ghost', %s, 'epoch', 'epoch', 0, 1)",
        [BIGINT_MAX],
    )
    scheduler = leader()
    try:
        drive(scheduler, 1)
    finally:
        scheduler.shutdown()
    assert not scheduler.stats.leaderships and not scheduler.stats.fired
    assert "bigint out of range" in caplog.text
    assert elections() == BIGINT_MAX


def test_a_heartbeat_in_the_last_year_postgresql_holds(db_now):
    """The same as 'infinity': a heartbeat more than a lease ahead is nobody's."""
    healthy = every_second(db_now() - timedelta(seconds=2), 3)
    sql(
        "INSERT INTO scheduler_lock_t (lock_id, instance_id, epoch, last_heartbeat,"
        f" acquired_ts, holder_pid, buckets) VALUES (1, 'ghost', 7, {LAST_TIMESTAMP},"
        " 'epoch', 0, 1)"
    )
    scheduler = leader()
    try:
        since = db_now()
        drive(scheduler, 3, until=lambda: all(fire_times(healthy, since).values()))
    finally:
        scheduler.shutdown()
    assert all(fire_times(healthy, since).values())
    assert elections() == 8
