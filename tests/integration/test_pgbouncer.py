"""The cluster behind a real PgBouncer in transaction mode (docs/pgbouncer.md).

Every run_scheduler and run_relay here connects through PgBouncer with a pool smaller than
its clients, so backends are shared between them and with other clients, as in production.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import F, Max

from django_dsched.enums import DeliveryStatus, FrequencyUnit, MisfirePolicy
from django_dsched.models import Event, Lease, OutboxMessage
from tests.factories import ScheduleFactory
from tests.helpers import wait_for
from tests.integration import relay_settings
from tests.integration.test_cluster import (
    check_every_slot_fired_once_in_both_tables,
    check_no_gaps,
    leader,
)
from tests.pgbouncer import POOL_SIZE, PgBouncer

pytestmark = pytest.mark.integration

SETTINGS = "--settings=tests.integration.pooled_settings"
LEASE = settings.DSCHED_LEASE_SECONDS
POLLING = "connects through a pooler: polling instead of LISTEN"


def start(cluster, bouncer: PgBouncer, name: str, *args: str, command: str = "run_scheduler"):
    env = {
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "RELAY_TEST_LOG": str(Path(bouncer.workdir, "deliveries.log")),
    }
    return cluster.start(name, SETTINGS, *args, command=command, env=env)


def every_second(count: int, db_now) -> list:
    # CATCH_UP: the slots missed while the lease expires fire late, each one (no gap).
    return ScheduleFactory.create_batch(
        count,
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        start_ts=db_now(),
        misfire_policy=MisfirePolicy.CATCH_UP,
    )


def test_the_cluster_fires_every_slot_once_and_fails_over_by_the_lease(cluster, pgbouncer, db_now):
    schedules = every_second(20, db_now)
    for name in ("alpha", "beta", "gamma"):
        start(cluster, pgbouncer, name)
    first, epoch = wait_for(leader, timeout=15, what="a leader")
    wait_for(lambda: Event.objects.count() >= 60, timeout=15, what="fires")
    for name, instance in cluster.instances.items():
        # A loaded machine may still be starting a standby: wait for its session, bounded.
        wait_for(lambda i=instance: POLLING in i.log(), timeout=30, what=f"{name} to poll")
    # A pooled backend says nothing about the leader's life: no pid is offered.
    assert Lease.objects.get().holder_pid == 0

    killed_at = time.monotonic()
    cluster.instances[first].signal(signal.SIGKILL)
    second, second_epoch = wait_for(
        lambda: (current := leader()) and current[0] != first and current,
        timeout=LEASE + 10,
        what="a standby to take over",
    )
    failover = time.monotonic() - killed_at
    print(f"pooled: failover after SIGKILL of the leader {failover:.2f} s (lease {LEASE} s)")
    assert second_epoch == epoch + 1
    # By the lease's expiry (its backend lives on in the pool), well before it plus a margin.
    assert failover < LEASE + 2.5, cluster.logs()
    fired_before = Event.objects.filter(leader_epoch=second_epoch).count()
    wait_for(
        lambda: Event.objects.filter(leader_epoch=second_epoch).count() >= fired_before + 40,
        timeout=15,
        what="fires by the new leader",
    )
    # The standby first: stopped first, the leader would hand the lease to it (a third epoch).
    for name in sorted(set(cluster.instances) - {first}, key=lambda n: n == second):
        assert cluster.instances[name].stop() == 0, cluster.logs()
    check_every_slot_fired_once_in_both_tables()
    check_no_gaps(schedules, timedelta(seconds=1))
    assert set(Event.objects.values_list("leader_epoch", flat=True)) == {epoch, second_epoch}


def test_nothing_the_loops_do_stays_on_the_backends_other_clients_get(cluster, pgbouncer, db_now):
    every_second(5, db_now)
    for name in ("alpha", "beta"):
        start(cluster, pgbouncer, name)
    start(cluster, pgbouncer, "relay", command="run_relay")
    wait_for(leader, timeout=15, what="a leader")
    wait_for(
        lambda: OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED).count() >= 15,
        timeout=20,
        what="fires delivered",
    )
    used = pgbouncer.server_pids()
    for instance in cluster.instances.values():
        assert instance.stop() == 0, cluster.logs()

    # Each client holds a transaction, so each has a backend of its own: the whole pool.
    clients = [pgbouncer.connect(connection.settings_dict["NAME"]) for _ in range(POOL_SIZE)]
    try:
        seen = [
            client.execute(
                "SELECT pg_backend_pid(), current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('application_name'), array(SELECT pg_listening_channels())"
            ).fetchone()
            for client in clients
        ]
    finally:
        for client in clients:
            client.close()
    assert {pid for pid, *_ in seen} >= used
    for _pid, idle_timeout, application_name, channels in seen:
        assert idle_timeout == "0"
        assert not application_name.startswith("dsched")
        assert channels == []


def test_backends_recycled_by_the_pooler_do_not_depose_a_live_leader(cluster, pgbouncer, db_now):
    every_second(5, db_now)
    for name in ("alpha", "beta"):
        start(cluster, pgbouncer, name)
    current = wait_for(leader, timeout=15, what="a leader")
    wait_for(lambda: Event.objects.count() >= 10, timeout=15, what="fires")
    fired = Event.objects.count()
    # PgBouncer closes backends as it likes (server_lifetime, server_idle_timeout): the one the
    # leader last renewed from goes while the leader lives on. Here every second.
    pgbouncer.admin("SET server_lifetime = 1")
    recycled: set[int] = set()
    try:
        deadline = time.monotonic() + 2 * LEASE
        while time.monotonic() < deadline:
            recycled |= pgbouncer.server_pids()
            time.sleep(0.05)
    finally:
        pgbouncer.admin("SET server_lifetime = 3600")
    assert len(recycled) > POOL_SIZE, "the pool's backends were not replaced"
    assert leader() == current, cluster.logs()
    wait_for(lambda: Event.objects.count() >= fired + 20, timeout=15, what="more fires")
    assert leader() == current, cluster.logs()


def test_without_listen_fires_and_deliveries_wait_at_most_a_poll(cluster, pgbouncer, db_now):
    start(cluster, pgbouncer, "solo")
    relay = start(cluster, pgbouncer, "relay", command="run_relay")
    wait_for(leader, timeout=15, what="a leader")
    wait_for(lambda: POLLING in relay.log(), timeout=15, what="the relay to start")
    # Created while both sleep; the NOTIFY it sends reaches no one through the pooler.
    schedules = every_second(3, db_now)
    wait_for(
        lambda: OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED).count() >= 15,
        timeout=20,
        what="fires delivered",
    )
    fires = Event.objects.filter(aggregate_id__in=[s.pk for s in schedules])
    fire_lag = fires.aggregate(lag=Max(F("event_ts") - F("scheduled_ts")))["lag"]
    delivered = OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED)
    delivery_lag = delivered.aggregate(lag=Max(F("delivered_ts") - F("event_ts")))["lag"]
    print(f"pooled: first fire lag {fire_lag}, worst delivery lag {delivery_lag}")
    # Polls are DSCHED_POLL_INTERVAL (capped by the heartbeat) and RELAY_POLL_INTERVAL apart;
    # one more second of slack for a loaded machine.
    assert fire_lag < timedelta(seconds=settings.DSCHED_POLL_INTERVAL + 1)
    assert delivery_lag < timedelta(seconds=relay_settings.DSCHED_RELAY_POLL_INTERVAL + 1)
