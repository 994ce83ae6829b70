"""A frozen instance stalls only its own buckets: the others never wait on its locks.

Instance A is frozen (SIGSTOP) in the middle of a fire, while its transaction holds its
bucket lease rows FOR SHARE (the fence). The other instance's takeover statements pass over
locked rows instead of waiting on them, so its own buckets keep their cadence; A's session
is ended by its idle-in-transaction timeout (half a lease), before its lease expires, and
its buckets are taken within the lease plus a second.
"""

from __future__ import annotations

import itertools
import signal
from collections import defaultdict
from datetime import timedelta

import pytest

from django_dsched.cluster.buckets import ranking
from django_dsched.enums import FrequencyUnit
from django_dsched.models import Event
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory
from tests.helpers import sql, wait_for
from tests.integration.test_bucket_cluster import LEASE
from tests.integration.test_cluster import check_every_slot_fired_once_in_both_tables

pytestmark = pytest.mark.integration

BUCKETS = 4
ENV = {"DSCHED_TEST_BUCKETS": str(BUCKETS)}


def holders() -> dict[int, str]:
    """bucket -> instance holding an unexpired lease on it."""
    rows = sql(
        "SELECT (lock_id - 1) / 65536, instance_id FROM scheduler_lock_t"
        " WHERE lock_id %% 65536 = 1 AND lock_id < 1 + %s * 65536"
        " AND last_heartbeat > clock_timestamp() - %s * interval '1 s'",
        [BUCKETS, LEASE],
    )
    return dict(rows)


def both_hold() -> dict[int, str] | None:
    """Every bucket held by its rendezvous owner between "a" and "b": settled (while the
    second instance joins, the first can still hold one of its buckets, handed over moments
    later with a new epoch)."""
    current = holders()
    settled = {bucket: ranking(bucket, ["a", "b"], 1)[0] for bucket in range(BUCKETS)}
    return current if current == settled else None


def fire_times(since) -> dict:
    fired = defaultdict(list)
    for schedule_id, ts in Event.objects.filter(
        event_ts__gte=since, scheduled_ts__isnull=False
    ).values_list("aggregate_id", "event_ts"):
        fired[schedule_id].append(ts)
    return fired


def longest_gap(times: list, since, until) -> float:
    points = [since, *sorted(times), until]
    return max((b - a).total_seconds() for a, b in itertools.pairwise(points))


@pytest.fixture
def slow_fire():
    """Fires of the schedules listed in dsched_test_slow take half a second in the database
    (a slow trigger), so a freeze can be aimed at the moment their owner's fire
    transaction is open."""
    sql("CREATE TABLE dsched_test_slow (id uuid PRIMARY KEY)")
    sql(
        "CREATE FUNCTION dsched_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.scheduled_ts IS NOT NULL"
        " AND EXISTS (SELECT FROM dsched_test_slow WHERE id = NEW.aggregate_id)"
        " THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END $$"
    )
    sql(
        "CREATE TRIGGER dsched_test_slow BEFORE INSERT ON event_store_t"
        " FOR EACH ROW EXECUTE FUNCTION dsched_test_slow()"
    )
    try:
        yield
    finally:
        sql("DROP TRIGGER IF EXISTS dsched_test_slow ON event_store_t")
        sql("DROP FUNCTION IF EXISTS dsched_test_slow()")
        sql("DROP TABLE IF EXISTS dsched_test_slow")


def test_a_peer_frozen_mid_fire_stalls_only_its_own_buckets(cluster, db_now, slow_fire):
    schedules = ScheduleFactory.create_batch(
        16, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    a, b = cluster.start("a", env=ENV), cluster.start("b", env=ENV)
    owners = wait_for(both_hold, timeout=20, what="two owners")
    bucket = {s.schedule_id: s.bucket_key % BUCKETS for s in schedules}
    of_a = [s for s in schedules if owners[bucket[s.schedule_id]] == "a"]
    of_b = [s for s in schedules if owners[bucket[s.schedule_id]] == "b"]
    assert of_a and of_b
    # One of A's schedules fires slowly.
    sql("INSERT INTO dsched_test_slow VALUES (%s)", [of_a[0].schedule_id])
    try:
        # A's session is now inside that fire (its fence holds A's bucket rows FOR SHARE).
        wait_for(
            lambda: sql(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                " AND application_name = 'dsched:a'"
            ),
            timeout=15,
            what="A inside a slow fire",
        )
        a.signal(signal.SIGSTOP)
        frozen_at = database_now()
        a_buckets = {n for n, holder in owners.items() if holder == "a"}
        # B takes A's buckets once A's lease has expired.
        wait_for(
            lambda: all(holders().get(n) == "b" for n in a_buckets),
            timeout=4 * LEASE,
            what="B to take A's buckets",
        )
        taken = sql(
            "SELECT max(acquired_ts) FROM scheduler_lock_t"
            " WHERE (lock_id - 1) / 65536 = ANY(%s) AND lock_id %% 65536 = 1",
            [sorted(a_buckets)],
        )[0][0]
        wait_for(lambda: database_now() > taken + timedelta(seconds=2), what="time to pass")
        until = database_now()
    finally:
        sql("DELETE FROM dsched_test_slow")
        a.signal(signal.SIGCONT)
    fired = fire_times(frozen_at - timedelta(seconds=1))
    since = frozen_at - timedelta(seconds=1)
    # B's own schedules (period 1 s) never went more than a second past their cadence.
    worst_b = max(longest_gap(fired[s.schedule_id], since, until) for s in of_b)
    assert worst_b <= 2.0, (worst_b, cluster.logs())
    # A's buckets were taken within the lease and a second of the freeze.
    assert (taken - frozen_at).total_seconds() <= LEASE + 1.0, (taken, frozen_at, cluster.logs())
    for instance in (a, b):
        assert instance.stop() == 0, cluster.logs()
    check_every_slot_fired_once_in_both_tables()
