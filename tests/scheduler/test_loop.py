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
        from django_dsched.cluster.lease import LeaseHolder

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
        from django_dsched.cluster.lease import LeaseHolder

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
    try:
        scheduler._guarded(scheduler.step)  # leads; its retention thread purges soon after
        wait_for(
            lambda: set(OutboxMessage.objects.values_list("id", flat=True)) == {*fresh, *dead},
            what="the expired messages to be deleted",
        )
    finally:
        scheduler.shutdown()


def test_a_due_row_locked_by_another_transaction_is_polled_not_spun(db_now):
    """An admin save or an API call holding a due row's lock: the claim skips the row and
    the leader looks again on a bounded, growing interval (it used to spin at ~2,700
    queries/s); other schedules fire on time meanwhile, the row as soon as it is free."""
    from django_dsched.enums import FrequencyUnit

    locked = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    ticking = ScheduleFactory(
        frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    scheduler = Scheduler(instance_id="patient")
    thread = threading.Thread(target=scheduler.run)
    with other_session() as holder:
        holder.set_autocommit(False)
        sql("SELECT FROM schedule_t WHERE schedule_id = %s FOR UPDATE", [locked.pk], using=holder)
        thread.start()
        try:
            started = time.monotonic()
            wait_for(
                lambda: Event.objects.filter(aggregate_id=ticking.pk).count() >= 3,
                what="the other schedule to keep firing",
            )
            held = time.monotonic() - started
            claims = scheduler.stats.claims
            assert claims < 20 * held + 20, (claims, held)
            assert scheduler.stats.locked_waits > 0
            assert not Event.objects.filter(aggregate_id=locked.pk).exists()
        finally:
            holder.rollback()  # the lock goes, without any NOTIFY
        try:
            wait_for(
                lambda: Event.objects.filter(aggregate_id=locked.pk).exists(),
                timeout=3,
                what="the released row to fire",
            )
        finally:
            scheduler.stop()
            thread.join(10)


def test_a_slow_purge_never_delays_a_heartbeat_or_a_fire(settings, db_now):
    """Retention runs on its own thread and connection: a purge stuck on a lock leaves the
    leader renewing its lease and firing."""
    from django_dsched.enums import FrequencyUnit
    from tests.outbox_helpers import make_messages

    settings.DSCHED_RETENTION_DAYS = 1
    expired = make_messages(3, status="DELIVERED", age=2 * 86400)
    sql(
        "UPDATE outbox_message_t SET delivered_ts = event_ts WHERE id = ANY(%s)",
        [[str(i) for i in expired]],
    )
    ticking = ScheduleFactory(
        frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    # Every delete of an outbox row waits for an advisory lock the test holds.
    sql(
        """
        CREATE FUNCTION test_slow_purge() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN OLD; END $$;
        CREATE TRIGGER test_slow_purge BEFORE DELETE ON outbox_message_t
            FOR EACH ROW EXECUTE FUNCTION test_slow_purge();
        """
    )
    scheduler = Scheduler(instance_id="busy")
    thread = threading.Thread(target=scheduler.run)
    try:
        with other_session() as blocker:
            sql("SELECT pg_advisory_lock(4242)", using=blocker)
            thread.start()
            try:
                wait_for(
                    lambda: sql(
                        "SELECT 1 FROM pg_stat_activity"
                        " WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
                    ),
                    what="the purge to wait on the lock",
                )
                epoch = wait_for(lambda: Lease.objects.get().epoch, what="leadership")
                first = Lease.objects.get().last_heartbeat
                fired = Event.objects.filter(aggregate_id=ticking.pk).count()
                # Longer than the lease (3 s): without heartbeats the lease would lapse.
                wait_for(
                    lambda: Event.objects.filter(aggregate_id=ticking.pk).count() >= fired + 4,
                    what="fires while the purge is stuck",
                )
                lease = Lease.objects.get()
                assert lease.epoch == epoch
                assert lease.last_heartbeat > first
                assert sql(
                    "SELECT clock_timestamp() - last_heartbeat < interval '2 seconds'"
                    " FROM scheduler_lock_t"
                )[0][0]
                assert OutboxMessage.objects.filter(id__in=expired).count() == 3
            finally:
                sql("SELECT pg_advisory_unlock(4242)", using=blocker)
        wait_for(
            lambda: not OutboxMessage.objects.filter(id__in=expired).exists(),
            what="the purge to finish once the lock is gone",
        )
    finally:
        scheduler.stop()
        thread.join(10)
        sql("DROP TRIGGER test_slow_purge ON outbox_message_t; DROP FUNCTION test_slow_purge();")
