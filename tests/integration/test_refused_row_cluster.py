"""A row the database refuses to fire, in a cluster of run_scheduler processes with
buckets: it is set aside within one lease, every healthy schedule keeps firing, and no
instance gives up its buckets (epochs do not climb)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import FrequencyUnit, ScheduleState
from django_dsched.models import Schedule
from django_dsched.runtime.clock import database_now
from tests.factories import ScheduleFactory
from tests.helpers import sql, wait_for
from tests.integration.test_bucket_cluster import LEASE
from tests.integration.test_cluster import check_every_slot_fired_once_in_both_tables
from tests.integration.test_frozen_peer import ENV, both_hold, fire_times, longest_gap

pytestmark = pytest.mark.integration


@pytest.fixture
def poison_rule():
    """A rule added by hand that one row's fire breaks (NOT VALID: rows need not meet it
    until they are updated)."""
    sql(
        "ALTER TABLE schedule_t ADD CONSTRAINT poison"
        " CHECK (schedule_name <> 'poison' OR fire_count = 0) NOT VALID"
    )
    try:
        yield
    finally:
        sql("ALTER TABLE schedule_t DROP CONSTRAINT IF EXISTS poison")


def test_a_refused_row_is_set_aside_and_every_bucket_keeps_firing(cluster, db_now, poison_rule):
    healthy = ScheduleFactory.create_batch(
        12, frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, start_ts=db_now()
    )
    instances = [cluster.start(name, env=ENV) for name in ("a", "b")]
    wait_for(both_hold, timeout=20, what="two owners")
    epochs_before = sql("SELECT sum(epoch) FROM scheduler_lock_t")[0][0]
    started = database_now()
    bad = ScheduleFactory(
        schedule_name="poison",
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        start_ts=started - timedelta(seconds=1),
    )
    aside = wait_for(
        lambda: Schedule.objects.filter(pk=bad.pk, state=ScheduleState.SET_ASIDE).first(),
        timeout=3 * LEASE,
        what="the refused row to be set aside",
    )
    assert (aside.set_aside_ts - started).total_seconds() <= LEASE, cluster.logs()
    assert 'constraint "poison"' in aside.set_aside_reason
    wait_for(lambda: database_now() > started + timedelta(seconds=2 * LEASE), what="a while")
    until = database_now()
    fired = fire_times(started)
    worst = max(longest_gap(fired[s.schedule_id], started, until) for s in healthy)
    assert worst <= LEASE + 1.0, (worst, cluster.logs())
    # Nobody dropped its buckets over it: no bucket changed hands.
    assert sql("SELECT sum(epoch) FROM scheduler_lock_t")[0][0] == epochs_before, cluster.logs()
    assert "finding the row" in cluster.logs()
    for instance in instances:
        assert instance.stop() == 0, cluster.logs()
    check_every_slot_fired_once_in_both_tables()
