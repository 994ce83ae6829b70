"""A row the database refuses to fire (a constraint, a trigger) is found and set aside with
the database's error; every other due schedule fires in the same round, and the instance
keeps its lease. A row the database will not even set aside is passed over for a while."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from django_dsched.enums import ScheduleState
from django_dsched.firing.batch import BatchOptions, fire_batch
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def constraint(check: str) -> Iterator[None]:
    """A CHECK on schedule_t that existing rows need not meet (NOT VALID): it refuses the
    updates that would leave a row violating it, as a hand-added rule would."""
    sql(f"ALTER TABLE schedule_t ADD CONSTRAINT poison CHECK ({check}) NOT VALID")
    try:
        yield
    finally:
        sql("ALTER TABLE schedule_t DROP CONSTRAINT IF EXISTS poison")


def due(db_now, count: int, **fields) -> list[Schedule]:
    return ScheduleFactory.create_batch(count, start_ts=db_now() - timedelta(seconds=5), **fields)


def fired_ids() -> set:
    return set(
        Event.objects.filter(scheduled_ts__isnull=False).values_list("aggregate_id", flat=True)
    )


def run_once(name: str = "survivor") -> Scheduler:
    scheduler = Scheduler(instance_id=name)
    scheduler.run_until_idle()
    return scheduler


def test_today_a_refused_row_fails_the_whole_batch(fence, db_now):
    due(db_now, 3)
    [bad] = due(db_now, 1, schedule_name="poison")
    with constraint("schedule_name <> 'poison' OR fire_count = 0"):
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            fire_batch(cursor, fence, 100)
        with transaction.atomic(), connection.cursor() as cursor:
            result = fire_batch(cursor, fence, 100, BatchOptions(narrow=True))
    assert (result.fired, result.set_aside, len(result.refused)) == (3, 1, 1)
    assert result.refused[0][0] == str(bad.schedule_id)
    assert "poison" in result.refused[0][1]


def test_the_row_is_set_aside_with_the_error_and_the_rest_fires_in_the_same_round(db_now):
    healthy = due(db_now, 40)
    [bad] = due(db_now, 1, schedule_name="poison")
    with constraint("schedule_name <> 'poison' OR fire_count = 0"):
        scheduler = run_once()
    assert fired_ids() == {s.schedule_id for s in healthy}
    bad.refresh_from_db()
    assert (bad.state, bad.active, bad.fire_count) == (ScheduleState.SET_ASIDE, False, 0)
    assert "CheckViolation (23514)" in bad.set_aside_reason
    assert 'constraint "poison"' in bad.set_aside_reason
    audit = Event.objects.get(aggregate_id=bad.schedule_id)
    assert audit.event_type == "dsched.schedule.set_aside"
    assert 'constraint "poison"' in audit.payload["error"]
    assert not OutboxMessage.objects.filter(aggregate_id=bad.schedule_id).exists()
    # One refused write, one narrowed batch; the instance kept its session and its lease.
    stats = scheduler.stats
    assert (stats.refused, stats.narrowed, stats.leaderships, stats.fenced) == (1, 1, 1, 0)
    assert stats.fired == len(healthy)


def test_several_refused_rows_in_one_batch_are_each_found(db_now):
    healthy = due(db_now, 30)
    bad = [due(db_now, 1, schedule_name=f"poison-{n}")[0] for n in range(3)]
    with constraint("schedule_name NOT LIKE 'poison%%' OR fire_count = 0"):
        scheduler = run_once()
    assert fired_ids() == {s.schedule_id for s in healthy}
    states = Schedule.objects.filter(pk__in=[s.pk for s in bad]).values_list("state", flat=True)
    assert list(states) == [ScheduleState.SET_ASIDE] * 3
    assert scheduler.stats.refused == 3


def test_a_row_the_database_will_not_set_aside_either_is_passed_over(db_now):
    healthy = due(db_now, 10)
    [bad] = due(db_now, 1, schedule_name="poison")
    with constraint("schedule_name <> 'poison'"):  # refuses every update of the row
        scheduler = Scheduler(instance_id="survivor")
        try:
            scheduler._guarded(scheduler.step)
            assert fired_ids() == {s.schedule_id for s in healthy}
            bad.refresh_from_db()
            assert (bad.state, bad.active, bad.fire_count) == (ScheduleState.ACTIVE, True, 0)
            assert scheduler.stats.quarantined == 1
            assert list(scheduler._quarantine.until) == [str(bad.schedule_id)]
            # Passed over: the next round claims nothing and does not poll for a lock.
            assert scheduler._guarded(scheduler.step) > 0
            assert (scheduler.stats.quarantined, scheduler.stats.locked_waits) == (1, 0)
            assert scheduler.stats.leaderships == 1
        finally:
            scheduler.shutdown()


def test_a_stale_event_holding_the_version_does_not_stop_the_fire(db_now):
    """Versions are not a unique constraint (event_store_t is partitioned by id, and a unique
    constraint would have to include it): every writer bumps the schedule's version under its
    row lock in the statement that writes the event. An event written by hand with the
    version the fire takes neither stops the fire nor is counted as a slot that fired."""
    [bad] = due(db_now, 1)
    Event.objects.create(
        host_id=bad.host_id,
        aggregate_id=bad.schedule_id,
        aggregate_version=bad.aggregate_version + 1,
        event_type="stale.save",
        event_ts=db_now(),
        payload={},
        metadata={},
    )
    scheduler = run_once()
    assert fired_ids() == {bad.schedule_id}
    assert scheduler.stats.duplicates == 0
    bad.refresh_from_db()
    assert bad.state == ScheduleState.ACTIVE
    versions = Event.objects.filter(aggregate_id=bad.schedule_id).values_list(
        "aggregate_version", flat=True
    )
    assert sorted(versions) == [bad.aggregate_version, bad.aggregate_version]


def test_an_error_that_is_not_a_row_s_fault_goes_to_the_reconnect_path(db_now):
    due(db_now, 3)
    scheduler = Scheduler(instance_id="survivor")
    sql(
        "CREATE FUNCTION dsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'no room' USING ERRCODE = '53100'; END $$"
    )
    sql(
        "CREATE TRIGGER dsched_test_refuse BEFORE INSERT ON event_store_t"
        " FOR EACH ROW EXECUTE FUNCTION dsched_test_refuse()"
    )
    try:
        scheduler._guarded(scheduler.step)
        # Disk full is the server's state, not a row's: nothing is set aside.
        assert not Schedule.objects.filter(state=ScheduleState.SET_ASIDE).exists()
        assert scheduler.stats.db_errors == 1
        assert not scheduler.lease.is_leader
    finally:
        scheduler.shutdown()
        sql("DROP TRIGGER dsched_test_refuse ON event_store_t")
        sql("DROP FUNCTION dsched_test_refuse()")
