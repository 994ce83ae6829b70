"""Fires per second per host: a host over its rate has fires delayed, none lost, while
another host fires normally; the token buckets (driven by a clock of the test's own), the
claim's passing over held-back hosts, and the rates read from tenant_quota_t."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_dsched import api
from django_dsched.firing.batch import BatchOptions, BatchResult, fire_batch
from django_dsched.firing.next_due import next_due
from django_dsched.firing.throttle import Throttle, read_rates
from django_dsched.models import Event, Schedule, TenantQuota
from tests.helpers import sql

HOST_A = uuid.UUID(int=0xA)
HOST_B = uuid.UUID(int=0xB)
A, B = str(HOST_A), str(HOST_B)
COMMON = {"topic": "t", "event_type": "t.fire"}


@pytest.fixture(autouse=True)
def _no_new_tenant_rows(settings):
    """The rates here are the tests' own: no row for a new tenant (DSCHED_TENANT_MAX_*)."""
    settings.DSCHED_TENANT_MAX_ACTIVE_SCHEDULES = None
    settings.DSCHED_TENANT_MAX_FIRES_PER_SECOND = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the buckets alone ------------------------------------------------------------------------
def test_a_bucket_holds_a_second_of_fires_and_refills_at_the_rate():
    clock = Clock()
    throttle = Throttle(clock)
    throttle.configure({A: 2.0}, None)
    assert throttle.active
    assert [throttle.take(A) for _ in range(3)] == [True, True, False]
    assert throttle.take(B)  # no limit
    assert throttle.held_back() == [A] and throttle.delayed == 1
    assert throttle.ready_in() == pytest.approx(0.5)  # one fire's worth at 2/s
    clock.now += 0.5
    assert throttle.held_back() == []
    assert throttle.take(A) and not throttle.take(A)
    clock.now += 60
    assert [throttle.take(A) for _ in range(3)] == [True, True, False]  # never more than 2


def test_a_held_back_host_waits_for_a_tick_of_fires_and_the_default_applies_to_all():
    clock = Clock()
    throttle = Throttle(clock)
    throttle.configure({A: None}, 100.0)  # A: no limit; every other host 100/s
    assert throttle.take(A)
    for _ in range(100):
        assert throttle.take(B)
    assert not throttle.take(B)
    clock.now += 0.05  # five fires' worth: under a tick (10)
    assert throttle.held_back() == [B]
    assert throttle.ready_in() == pytest.approx(0.05)
    clock.now += 0.05
    assert throttle.held_back() == []


def test_with_buckets_an_instance_takes_its_share_of_the_rate():
    throttle = Throttle(Clock())
    throttle.configure({A: 8.0}, None, share=0.25)  # holds 4 of 16 buckets
    assert throttle.rate(A) == 2.0
    assert [throttle.take(A) for _ in range(3)] == [True, True, False]
    throttle.configure({}, None)
    assert not throttle.active and throttle.take(A) and throttle.buckets == {}


# -- the fire path ------------------------------------------------------------------------------
def fire(fence, throttle: Throttle, batch: int = 100) -> BatchResult:
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(cursor, fence, batch, BatchOptions(throttle=throttle))
    assert not result.fenced
    return result


def fires(host: uuid.UUID) -> list[tuple[uuid.UUID, int]]:
    """(schedule, slot fires) of ``host``'s schedules."""
    return sql(
        "SELECT s.schedule_id, count(e.id) FROM schedule_t s LEFT JOIN event_store_t e"
        " ON e.aggregate_id = s.schedule_id AND e.scheduled_ts IS NOT NULL"
        " WHERE s.host_id = %s GROUP BY 1",
        [host],
    )


@pytest.mark.django_db(transaction=True)
def test_a_host_over_its_rate_is_delayed_none_lost_while_another_fires(fence):
    for n in range(10):
        api.create_once(name=f"a-{n}", delay=timedelta(0), host_id=HOST_A, **COMMON)
        api.create_once(name=f"b-{n}", delay=timedelta(0), host_id=HOST_B, **COMMON)
    waiting_before = dict(Schedule.objects.filter(host_id=HOST_A).values_list("pk", "next_run_ts"))
    clock = Clock()
    throttle = Throttle(clock)
    throttle.configure({A: 2.0}, None)

    first = fire(fence, throttle)
    # B fires all it has; A two (its bucket), the other eight are left as they were.
    assert first.claimed == 20 and first.fired == 12 and first.throttled == 8
    assert sum(n for _, n in fires(HOST_B)) == 10
    assert sum(n for _, n in fires(HOST_A)) == 2
    waiting = Schedule.objects.filter(host_id=HOST_A, state="ACTIVE")
    assert waiting.count() == 8
    assert all(s.next_run_ts == waiting_before[s.pk] for s in waiting)  # slot kept

    # No time passed: A is held back, its rows are not even claimed (nor read as locked).
    second = fire(fence, throttle)
    assert (second.claimed, second.throttled) == (0, 0)
    with transaction.atomic(), connection.cursor() as cursor:
        assert next_due(cursor, fence, held_back=throttle.held_back()).locked is False
        assert next_due(cursor, fence).locked is True  # without it they would look locked

    # Half a second: one fire's worth.
    clock.now += 0.5
    third = fire(fence, throttle)
    assert (third.claimed, third.fired, third.throttled) == (8, 1, 7)

    # Then at the rate until none is left: two a second, never more.
    batches = 0
    while Schedule.objects.filter(host_id=HOST_A, state="ACTIVE").exists():
        clock.now += 1.0
        assert fire(fence, throttle).fired <= 2
        batches += 1
        assert batches < 10
    assert batches == 4  # 7 left, 2 a second
    # Every slot of A fired exactly once: delayed, never dropped or doubled.
    assert sorted(n for _, n in fires(HOST_A)) == [1] * 10
    assert Event.objects.filter(host_id=HOST_A, scheduled_ts__isnull=False).count() == 10


@pytest.mark.django_db(transaction=True)
def test_a_delayed_catch_up_schedule_fires_every_slot_later(fence):
    """A CATCH_UP schedule whose host is held back for 3 s fires the slots of those seconds
    once it has tokens, oldest first: the wait lags it, it drops nothing."""
    start = sql("SELECT now() - interval '200 milliseconds'")[0][0]
    schedule = api.create_interval(
        name="every-second",
        every=1,
        unit="SECONDS",
        start=start,
        misfire_policy="CATCH_UP",
        host_id=HOST_A,
        **COMMON,
    )
    clock = Clock()
    throttle = Throttle(clock)
    throttle.configure({A: 1.0}, None)
    assert throttle.take(A)  # the host spent its token elsewhere
    assert fire(fence, throttle).fired == 0
    sql("SELECT pg_sleep(3)")
    clock.now += 1.0
    slots = []
    for _ in range(4):
        result = fire(fence, throttle)
        slots += [s for s in result.slots if s is not None]
        clock.now += 1.0
    assert len(slots) == 4 and slots == sorted(slots)
    assert [b - a for a, b in itertools.pairwise(slots)] == [1_000_000] * 3
    schedule.refresh_from_db()
    assert schedule.misfire_count == 0


# -- the rates, from the table ------------------------------------------------------------
@pytest.mark.django_db
def test_the_rates_come_from_the_table_rows_that_differ_from_the_default():
    TenantQuota.objects.create(host_id=HOST_A, max_fires_per_second=5)
    TenantQuota.objects.create(host_id=HOST_B, max_active_schedules=3)  # no rate
    with connection.cursor() as cursor:
        assert read_rates(cursor, None) == {A: 5.0}
        assert read_rates(cursor, 5.0) == {B: None}


@pytest.mark.django_db(transaction=True)
def test_the_loop_honours_the_tables_rate_and_counts_what_it_delayed():
    from django_dsched.scheduler import Scheduler

    TenantQuota.objects.create(host_id=HOST_A, max_fires_per_second=1)
    for n in range(3):
        api.create_once(name=f"a-{n}", delay=timedelta(0), host_id=HOST_A, **COMMON)
    api.create_once(name="b", delay=timedelta(0), host_id=HOST_B, **COMMON)
    scheduler = Scheduler(instance_id="quota-loop")
    fired = scheduler.run_until_idle()
    assert scheduler.throttle.rates == {A: 1.0}
    # One of A's (its bucket holds one), B's; A's other two wait, still active.
    assert fired == 2 and scheduler.stats.throttled == 2
    assert Schedule.objects.filter(host_id=HOST_A, state="ACTIVE").count() == 2
