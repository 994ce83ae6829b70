"""State changes racing the fire path: the compare-and-set of ``pauses._transition``, and
the row lock of the one-statement cancel."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction

from django_dsched.changes import cancels, pauses
from django_dsched.cluster.bucket_count import agree_bucket_count
from django_dsched.cluster.lease import LeaseHolder
from django_dsched.counts import ChangeCount
from django_dsched.enums import ScheduleState
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.fence import Fence
from django_dsched.models import Event, Schedule
from tests.factories import ScheduleFactory
from tests.helpers import lock_waiter, other_session, sql

pytestmark = pytest.mark.django_db(transaction=True)


def _fence() -> Fence:
    """The fence of a lease this test holds (a fire batch needs one)."""
    sql("TRUNCATE scheduler_lock_t")
    agree_bucket_count("default", base=1, count=1, lease_seconds=30)
    lease = LeaseHolder(
        "default", lease_id=1, instance_id="racer", lease_seconds=30, fast_failover=False
    )
    assert lease.try_acquire()
    return Fence(1, "racer", lease.epoch, 30.0)


@pytest.fixture
def fire_between_read_and_write(monkeypatch):
    """Make the next state change's write run right after a real fire batch commits."""
    fence = _fence()
    write = pauses._write

    def fire_then_write(*args, **kwargs):
        with transaction.atomic(), connection.cursor() as cursor:
            fire_batch(cursor, fence, 10)
        monkeypatch.setattr(pauses, "_write", write)  # once
        return write(*args, **kwargs)

    monkeypatch.setattr(pauses, "_write", fire_then_write)


def _completed_by_its_next_fire() -> Schedule:
    """A schedule the fire path completes without firing (its fire limit is reached), so
    its version does not move: only the state tells a change that it lost the race."""
    schedule = ScheduleFactory(max_fires=3)
    sql(
        "UPDATE schedule_t SET fire_count = 3, next_run_ts = now() - interval '1 s'"
        " WHERE schedule_id = %s",
        [schedule.pk],
    )
    return schedule


def test_a_pause_never_overwrites_a_completion_the_fire_path_made_meanwhile(
    fire_between_read_and_write,
):
    schedule = _completed_by_its_next_fire()

    result = pauses.pause(Schedule.objects.filter(pk=schedule.pk))

    _assert_completed_and_skipped(schedule, result)


def test_a_cancel_waits_for_a_fire_in_flight_and_decides_on_the_row_it_left():
    """The cancel's one statement locks the row: a fire batch that completes the schedule
    holds the lock, uncommitted; the cancel waits for it, then finds the schedule
    completed and leaves it so (skipped, no event)."""
    fence = _fence()
    schedule = _completed_by_its_next_fire()
    fired, commit = threading.Event(), threading.Event()

    def fire() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                fire_batch(cursor, fence, 10)
                fired.set()
                commit.wait(30)
        finally:
            connections.close_all()

    def commit_once_the_cancel_waits() -> None:
        try:
            with other_session() as watcher:
                lock_waiter(
                    "%FOR UPDATE%", what="the cancel waiting for the fire's lock", using=watcher
                )
        finally:
            commit.set()

    firing = threading.Thread(target=fire)
    firing.start()
    assert fired.wait(10)
    committer = threading.Thread(target=commit_once_the_cancel_waits)
    committer.start()
    try:
        result = cancels.cancel(Schedule.objects.filter(pk=schedule.pk))
    finally:
        commit.set()
        committer.join(30)
        firing.join(30)

    _assert_completed_and_skipped(schedule, result)


def _assert_completed_and_skipped(schedule: Schedule, result: ChangeCount) -> None:
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.state == ScheduleState.COMPLETED
    assert not row.active
    assert (result.changed, result.skipped) == (0, 1)
    verbs = set(Event.objects.filter(aggregate_id=schedule.pk).values_list("event_type", flat=True))
    assert not verbs & {"dsched.schedule.paused", "dsched.schedule.cancelled"}


@pytest.mark.parametrize(
    ("change", "outcome"),
    [
        ("SET state = 'PAUSED', active = false", "PAUSED"),
        ("SET state = 'COMPLETED', active = false", None),
        ("SET schedule_name = 'renamed'", "ACTIVE"),
        ("DELETE", "gone"),
    ],
)
def test_a_cancel_by_name_decides_on_the_row_as_the_transaction_it_waited_for_left_it(
    change: str, outcome: str | None
) -> None:
    """``api.cancel("x")``: its lookup (the statement's subquery) sees the row on the
    statement's snapshot; the lock then waits for the transaction changing the row and
    decides on the row as it was left (the lookup is not evaluated again): paused, it is
    cancelled from paused; completed, skipped; renamed, cancelled all the same (the row
    the lookup found); deleted, "no such schedule" and nothing written."""
    from django_dsched import api

    schedule = ScheduleFactory(schedule_name="x")
    result: list[Any] = []

    def cancel() -> None:
        try:
            result.append(api.cancel("x"))
        except Exception as exc:  # asserted below
            result.append(exc)
        finally:
            connections.close_all()

    with other_session() as other:
        sql("BEGIN", using=other)
        if change == "DELETE":
            sql("DELETE FROM schedule_t WHERE schedule_id = %s", [schedule.pk], using=other)
        else:
            sql(
                f"UPDATE schedule_t {change}, aggregate_version = aggregate_version + 1"
                " WHERE schedule_id = %s",
                [schedule.pk],
                using=other,
            )
        thread = threading.Thread(target=cancel)
        thread.start()
        lock_waiter("%FOR UPDATE%", what="the cancel waiting for the row lock")
        sql("COMMIT", using=other)
        thread.join(timeout=30)

    (done,) = result
    events = Event.objects.filter(aggregate_id=schedule.pk, event_type="dsched.schedule.cancelled")
    if outcome == "gone":
        assert isinstance(done, Schedule.DoesNotExist)
        assert not events.exists()
        return
    row = Schedule.objects.get(pk=schedule.pk)
    if outcome is None:
        assert done is False
        assert row.state == ScheduleState.COMPLETED
        assert not events.exists()
        return
    assert done is True
    assert row.state == ScheduleState.CANCELLED
    (event,) = events
    assert event.aggregate_version == row.aggregate_version == schedule.aggregate_version + 2
    assert event.payload["changes"] == {"state": [outcome, "CANCELLED"]}
    assert event.metadata["schedule_name"] == row.schedule_name
