from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from django_dsched.models import Event, Lease, OutboxMessage
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def due(db_now, n=1, **kwargs):
    return ScheduleFactory.create_batch(n, start_ts=db_now() - timedelta(seconds=5), **kwargs)


def test_run_until_idle_fires_everything_due_in_batches(db_now):
    due(db_now, 120)
    scheduler = Scheduler(instance_id="solo", batch_size=50)
    assert scheduler.run_until_idle() == 120
    assert scheduler.stats.batches == 3
    assert Event.objects.count() == OutboxMessage.objects.count() == 120
    # The lease was given back on the way out.
    assert Lease.objects.get().last_heartbeat.year == 1970


def test_a_standby_fires_nothing_while_a_live_leader_holds_the_lease(db_now):
    due(db_now, 3)
    with other_session() as leader_session:
        from django_dsched.scheduler.lease import LeaseHolder

        leader = LeaseHolder(
            leader_session, lease_id=1, instance_id="leader", lease_seconds=30, fast_failover=True
        )
        assert leader.try_acquire()
        standby = Scheduler(instance_id="standby")
        assert standby.run_until_idle() == 0
    assert Event.objects.count() == 0


def test_a_deposed_leader_cannot_commit_a_fire(db_now):
    """A leader paused past its lease resumes believing it leads: its fires are refused."""
    old = Scheduler(instance_id="old")
    old._ensure_session()
    assert old.lease.try_acquire()
    old_epoch = old.lease.epoch
    # While "old" was paused its lease expired and another instance took it.
    sql("UPDATE scheduler_lock_t SET last_heartbeat = clock_timestamp() - interval '1 hour'")
    with other_session() as s2:
        from django_dsched.scheduler.lease import LeaseHolder

        assert LeaseHolder(
            s2, lease_id=1, instance_id="new", lease_seconds=30, fast_failover=True
        ).try_acquire()
    due(db_now, 5)
    # "old" resumes with its local trust window still open and goes straight to firing.
    old.lease.trusted_until = time.monotonic() + 60
    old._fire_due()
    assert old.stats.fenced == 1
    assert not old.lease.is_leader
    assert Event.objects.filter(leader_epoch=old_epoch).count() == 0
    assert Event.objects.count() == 0
    old.shutdown()


def test_losing_the_connection_is_survived(db_now):
    scheduler = Scheduler(instance_id="flaky")
    scheduler._guarded(scheduler.step)
    assert scheduler.lease.is_leader
    pid = sql("SELECT pg_backend_pid()", using=connection)[0][0]
    assert pid
    own_pid = sql("SELECT holder_pid FROM scheduler_lock_t")[0][0]
    with other_session() as admin:
        sql("SELECT pg_terminate_backend(%s)", [own_pid], using=admin)
    wait = scheduler._guarded(scheduler.step)
    assert scheduler.stats.db_errors == 1
    assert not scheduler.lease.is_leader
    assert 0 < wait <= 5
    due(db_now, 2)
    # The next round reconnects and leads again (its old session is gone: fast failover).
    scheduler._guarded(scheduler.step)
    assert scheduler.lease.is_leader
    wait_for(
        lambda: scheduler._guarded(scheduler.step) >= 0 and Event.objects.count() == 2,
        timeout=5,
        what="fires after reconnect",
    )
    scheduler.shutdown()


def test_a_sleeping_leader_wakes_when_a_schedule_is_created(db_now):
    scheduler = Scheduler(instance_id="sleeper", poll_interval=30)
    assert scheduler._guarded(scheduler.step) > 0  # leads; nothing due
    assert scheduler.lease.is_leader
    woke = threading.Event()
    pgconn = scheduler._pgconn()

    def sleep():
        scheduler.waker.wait(30, pgconn)
        woke.set()

    thread = threading.Thread(target=sleep)
    thread.start()
    try:
        with other_session() as s2:
            sql(
                "INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,"
                " frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,"
                " event_data) VALUES (gen_random_uuid(), gen_random_uuid(), 'n', 'MINUTES', 1,"
                " now(), now(), now(), 't', 'x', '{}')",
                using=s2,
            )
        assert woke.wait(5), "the leader did not wake on NOTIFY"
    finally:
        scheduler.stop()
        thread.join(5)
        scheduler.shutdown()


def test_stop_interrupts_the_sleep_and_releases_the_lease():
    scheduler = Scheduler(instance_id="stopper", poll_interval=30)
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    wait_for(lambda: Lease.objects.filter(instance_id="stopper").exists(), what="leadership")
    started = time.monotonic()
    scheduler.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - started < 5
    assert Lease.objects.get().last_heartbeat.year == 1970


def test_instances_report_themselves_and_leave_when_stopped():
    from django_dsched.models import SchedulerInstance

    leader = Scheduler(instance_id="one")
    leader._guarded(leader.step)
    rows = dict(SchedulerInstance.objects.values_list("instance_id", "role"))
    assert rows == {"one": "leader"}
    assert SchedulerInstance.objects.get().epoch == leader.lease.epoch
    leader.shutdown()
    assert not SchedulerInstance.objects.exists()


def test_the_leader_deletes_expired_history(settings):
    from tests.outbox_helpers import make_messages

    settings.DSCHED_RETENTION_DAYS = 1
    old = make_messages(3, status="DELIVERED", age=2 * 86400)
    fresh = make_messages(2, status="DELIVERED")
    dead = make_messages(1, status="DELIVERY_FAILED", age=2 * 86400)
    sql(
        "UPDATE outbox_message_t SET delivered_ts = event_ts WHERE id = ANY(%s)",
        [[str(i) for i in old]],
    )
    scheduler = Scheduler(instance_id="janitor")
    scheduler._guarded(scheduler.step)  # leads
    scheduler._next_heartbeat = 0  # the next round is a heartbeat
    scheduler._guarded(scheduler.step)
    remaining = set(OutboxMessage.objects.values_list("id", flat=True))
    assert remaining == {*fresh, *dead}
    assert not remaining & set(old)
    scheduler.shutdown()
