"""State changes racing the fire path: the compare-and-set of ``services._transition``."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_dsched import services
from django_dsched.enums import ScheduleState
from django_dsched.models import Event, Schedule
from django_dsched.scheduler.firing import Fence, fire_batch
from django_dsched.scheduler.lease import LeaseHolder, agree_bucket_count
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fire_between_read_and_write(monkeypatch):
    """Make the next state change's write run right after a real fire batch commits."""
    sql("TRUNCATE scheduler_lock_t")
    agree_bucket_count("default", base=1, count=1, lease_seconds=30)
    lease = LeaseHolder(
        "default", lease_id=1, instance_id="racer", lease_seconds=30, fast_failover=False
    )
    assert lease.try_acquire()
    write = services._write

    def fire_then_write(*args, **kwargs):
        with transaction.atomic(), connection.cursor() as cursor:
            fire_batch(cursor, Fence(1, "racer", lease.epoch, 30.0), 10)
        monkeypatch.setattr(services, "_write", write)  # once
        return write(*args, **kwargs)

    monkeypatch.setattr(services, "_write", fire_then_write)


@pytest.mark.parametrize("change", [services.pause, services.cancel])
def test_a_change_never_overwrites_a_completion_the_fire_path_made_meanwhile(
    fire_between_read_and_write, change
):
    # The fire path completes this schedule without firing (its fire limit is reached), so
    # its version does not move: only the state tells the change that it lost the race.
    schedule = ScheduleFactory(max_fires=3)
    sql(
        "UPDATE schedule_t SET fire_count = 3, next_run_ts = now() - interval '1 s'"
        " WHERE schedule_id = %s",
        [schedule.pk],
    )

    result = change(Schedule.objects.filter(pk=schedule.pk))

    row = Schedule.objects.get(pk=schedule.pk)
    assert row.state == ScheduleState.COMPLETED
    assert not row.active
    assert (result.changed, result.skipped) == (0, 1)
    verbs = set(Event.objects.filter(aggregate_id=schedule.pk).values_list("event_type", flat=True))
    assert not verbs & {"dsched.schedule.paused", "dsched.schedule.cancelled"}
