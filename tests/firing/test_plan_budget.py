"""A slow plan never locks the cluster out: planning has a budget well inside the lease, a
batch that cannot be planned in time shrinks (never retried whole), and catch-up finds its
slot on the grid without walking the backlog."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_dsched.cluster.lease import LeaseHolder
from django_dsched.enums import MisfirePolicy, ScheduleKind
from django_dsched.firing.batch import BatchOptions, fire_batch
from django_dsched.firing.claim import CLAIM, claim_args
from django_dsched.firing.fence import Fence
from django_dsched.firing.plan import plan
from django_dsched.models import Event, Lease, Schedule
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def catch_up_cron(db_now, backlog: timedelta, limit: int = 10_000, **kwargs):
    return ScheduleFactory(
        schedule_kind=ScheduleKind.CRON,
        cron_expression="* * * * * *",
        misfire_policy=MisfirePolicy.CATCH_UP,
        catch_up_limit=limit,
        start_ts=db_now() - backlog,
        **kwargs,
    )


@pytest.fixture
def lease():
    holder = LeaseHolder(
        connection, lease_id=1, instance_id="test", lease_seconds=30, fast_failover=True
    )
    assert holder.try_acquire()
    return holder


def test_rows_left_over_when_the_budget_runs_out_fire_in_the_next_batch(lease, db_now):
    # Hourly, half an hour away from now: the latest slot is backlog and the next one far
    # off, so each row fires exactly once (a slot due within the backlog window would fire
    # in a round of its own).
    now = db_now()
    slow = [
        ScheduleFactory(
            schedule_kind=ScheduleKind.CRON,
            cron_expression=f"{(now.minute + 30) % 60} * * * *",
            start_ts=now - timedelta(hours=3),
        )
        for _ in range(4)
    ]
    fast = ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=5))
    fence = Fence(1, "test", lease.epoch, 30.0)
    with transaction.atomic(), connection.cursor() as cursor:
        # A budget already spent: one slow row is planned (progress), the plain interval
        # rows always are, the other slow rows are left as they are.
        result = fire_batch(cursor, fence, 100, BatchOptions(deadline=time.monotonic() - 1))
    assert (result.claimed, result.fired, result.deferred, result.fenced) == (7, 4, 3, False)
    fired = set(Event.objects.values_list("aggregate_id", flat=True))
    assert {s.schedule_id for s in fast} <= fired
    assert len(fired & {s.schedule_id for s in slow}) == 1
    untouched = Schedule.objects.filter(pk__in=[s.pk for s in slow]).exclude(pk__in=fired)
    assert all(s.fire_count == 0 and s.aggregate_version == 1 for s in untouched)
    # The next batch takes them.
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(cursor, fence, 100, BatchOptions(deadline=time.monotonic() + 60))
    assert (result.claimed, result.fired, result.deferred) == (3, 3, 0)


def test_plan_with_a_spent_budget_still_plans_the_first_slow_row(db_now):
    for _ in range(3):
        catch_up_cron(db_now, timedelta(minutes=2), limit=10)
    with transaction.atomic():
        rows = sql(CLAIM, claim_args(10))
    decided = plan(rows, deadline=time.monotonic() - 1)
    assert (len(decided.ids), decided.deferred) == (1, 2)


def test_the_lease_is_renewed_inside_the_batch_when_planning_outlived_the_trust_window(
    lease, db_now
):
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '20 seconds'")
    before = Lease.objects.get().last_heartbeat
    lease.trusted_until = 0.0  # the local window closed while the batch was planned
    fence = Fence(1, "test", lease.epoch, 30.0)
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(
            cursor, fence, 10, BatchOptions(keep_lease=lambda: lease.is_trusted() or lease.renew())
        )
    assert (result.fired, result.fenced) == (1, False)
    assert Lease.objects.get().last_heartbeat > before
    assert lease.is_trusted()


def test_a_lost_lease_found_before_the_write_fires_nothing(lease, db_now):
    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    sql("UPDATE scheduler_lock_t SET epoch = epoch + 1, instance_id = 'other'")
    lease.trusted_until = 0.0
    fence = Fence(1, "test", lease.epoch, 30.0)
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(
            cursor, fence, 10, BatchOptions(keep_lease=lambda: lease.is_trusted() or lease.renew())
        )
        transaction.set_rollback(True)
    assert result.fenced
    assert not lease.is_leader
    assert not Event.objects.exists()


def test_catch_up_backlogs_never_lock_the_cluster_out(db_now):
    """The seen case: every-second crons catching up 10,000 slots each, 4 h behind. Before,
    planning one batch took longer than the lease: every leader was fenced, nothing fired,
    and the healthy schedules starved with them."""
    late = [catch_up_cron(db_now, timedelta(hours=4)) for _ in range(6)]
    healthy = ScheduleFactory.create_batch(20, start_ts=db_now() - timedelta(seconds=2))
    scheduler = Scheduler(instance_id="catcher")
    try:
        wait_for(
            lambda: (
                scheduler._guarded(scheduler.step) >= 0
                and Event.objects.filter(aggregate_id__in=[s.pk for s in late])
                .values("aggregate_id")
                .distinct()
                .count()
                == len(late)
                and Event.objects.filter(aggregate_id__in=[s.pk for s in healthy]).count()
                >= len(healthy)
            ),
            timeout=60,
            what="every schedule to fire",
        )
    finally:
        scheduler.shutdown()
    assert scheduler.stats.fenced == 0
    assert scheduler.stats.leaderships == 1
    for schedule in late:
        first = (
            Event.objects.filter(aggregate_id=schedule.pk)
            .order_by("scheduled_ts")
            .values_list("scheduled_ts", "event_ts")
            .first()
        )
        slot, fired_at = first
        # The oldest of the latest 10,000 slots: 9,999 s before the latest at that time.
        latest = fired_at.replace(microsecond=0)
        assert latest - slot in (timedelta(seconds=9999), timedelta(seconds=10000)), first
