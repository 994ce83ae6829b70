"""A backlog never starves on-time work: the claim takes what came due since the previous
claim first, and fills the rest of the batch from the backlog, which always gets a share."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_dsched.enums import FrequencyUnit
from django_dsched.firing.batch import BatchOptions, fire_batch
from django_dsched.firing.claim import CLAIM, CLAIMS, claim_args
from django_dsched.models import Event, Schedule
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

TENANT_A = uuid.UUID(int=0xA)
TENANT_B = uuid.UUID(int=0xB)


def backlog(count: int, due_ago: timedelta, prefix: str = "a") -> None:
    """``count`` hourly schedules of tenant A, all due ``due_ago`` (in SQL: quick)."""
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, schedule_kind,
            frequency_unit, frequency_time, start_ts, next_slot_ts, next_run_ts, event_topic,
            event_type, event_data)
        SELECT gen_random_uuid(), %s, %s || n, 'INTERVAL', 'HOURS', 1,
               now() - %s, now() - %s, now() - %s, 'a', 'a.tick', '{}'
        FROM generate_series(1, %s) AS n
        """,
        [TENANT_A, prefix, due_ago, due_ago, due_ago, count],
    )


def on_time(count: int) -> list[Schedule]:
    """Per-second schedules of tenant B, due now."""
    now = sql("SELECT now()")[0][0]
    return [
        Schedule.objects.create(
            host_id=TENANT_B,
            schedule_name=f"b-{n}",
            frequency_unit=FrequencyUnit.SECONDS,
            frequency_time=1,
            start_ts=now - timedelta(milliseconds=200),
            event_topic="b",
            event_type="b.tick",
        )
        for n in range(count)
    ]


def fire(fence, batch: int, since: int | None, again=()):
    with transaction.atomic(), connection.cursor() as cursor:
        result = fire_batch(cursor, fence, batch, BatchOptions(since_us=since, again=again))
    assert not result.fenced
    return result


def fired(host) -> int:
    return Event.objects.filter(host_id=host, scheduled_ts__isnull=False).count()


def test_on_time_schedules_are_claimed_before_an_older_backlog(fence):
    backlog(3000, timedelta(minutes=30))
    on_time(5)
    first = fire(fence, 500, since=None)
    # The backlog is older, yet B's five are in the first batch: they came due within the
    # last backlog window, A's did not.
    assert fired(TENANT_B) == 5
    assert first.claimed == 500 and fired(TENANT_A) == 495
    since = first.claimed_at
    for round_ in range(3):
        # B's schedules come due again (their next second): claimed first again.
        sql(
            "UPDATE schedule_t SET next_run_ts = clock_timestamp(), next_slot_ts = next_slot_ts"
            " WHERE host_id = %s",
            [TENANT_B],
        )
        result = fire(fence, 500, since)
        since = result.claimed_at
        assert fired(TENANT_B) == 5 * (round_ + 2)
        # The backlog fills the rest of each batch: it drains at the batch's full rate.
        assert result.claimed == 500
    assert fired(TENANT_A) == 495 * 4


def test_the_backlog_keeps_a_share_while_on_time_work_fills_the_batch(fence):
    backlog(100, timedelta(minutes=30))
    on_time(50)
    result = fire(fence, 20, since=None)
    # A tenth of the batch from the backlog, the rest on time: never more than the batch.
    assert result.claimed == 20
    assert (fired(TENANT_B), fired(TENANT_A)) == (18, 2)


def test_on_time_work_takes_the_backlogs_share_when_there_is_no_backlog(fence):
    on_time(50)
    result = fire(fence, 20, since=None)
    # A full batch of on-time work: the claim is not short, so nothing reads as locked.
    assert result.claimed == 20 and fired(TENANT_B) == 20


def test_a_backlog_with_nothing_on_time_drains_oldest_first(fence):
    backlog(30, timedelta(minutes=30))
    backlog(30, timedelta(minutes=50), prefix="older")
    result = fire(fence, 30, since=None)
    assert result.claimed == 30
    oldest = Schedule.objects.filter(pk__in=Event.objects.values("aggregate_id"))
    assert {s.start_ts for s in oldest} == {
        s.start_ts for s in Schedule.objects.order_by("start_ts")[:30]
    }


def test_a_catch_up_stays_on_time_while_a_backlog_drains(fence):
    """A row fired and due again at once (a catch-up's next slot) is claimed in the next
    batch, though it came due before that batch's previous claim."""
    backlog(3000, timedelta(minutes=30))
    now = sql("SELECT now()")[0][0]
    catching_up = Schedule.objects.create(
        host_id=TENANT_B,
        schedule_name="b-catch-up",
        frequency_unit=FrequencyUnit.SECONDS,
        frequency_time=1,
        start_ts=now - timedelta(seconds=4, milliseconds=500),
        misfire_policy="CATCH_UP",
        event_topic="b",
        event_type="b.tick",
    )
    # The last claim was ten seconds ago: the catch-up's slots came due since.
    ten_seconds_ago = sql(
        "SELECT (extract(epoch FROM now() - interval '10 seconds') * 1000000)::bigint"
    )[0][0]
    result = fire(fence, 500, since=ten_seconds_ago)
    assert fired(TENANT_B) == 1
    for round_ in range(3):
        assert result.again_ids == (str(catching_up.schedule_id),)
        result = fire(fence, 500, result.claimed_at, result.again_ids)
        assert fired(TENANT_B) == round_ + 2


def test_a_batch_never_claims_more_than_its_size(fence):
    """Catch-ups due again at once, on-time work and a backlog together: every claim stays
    within the batch size (the rows due again do not pile up from one batch to the next)."""
    backlog(30, timedelta(minutes=30))
    now = sql("SELECT now()")[0][0]
    for n in range(30):
        Schedule.objects.create(
            host_id=TENANT_B,
            schedule_name=f"b-catch-up-{n}",
            frequency_unit=FrequencyUnit.SECONDS,
            frequency_time=1,
            start_ts=now - timedelta(minutes=10),
            misfire_policy="CATCH_UP",
            catch_up_limit=10_000,
            event_topic="b",
            event_type="b.tick",
        )
    on_time(30)
    result = fire(fence, 10, since=None)
    sizes = [result.claimed]
    for _ in range(8):
        result = fire(fence, 10, result.claimed_at, result.again_ids)
        sizes.append(result.claimed)
    assert max(sizes) <= 10, sizes
    # Nothing starves: on-time work and the backlog both got part of the batches.
    assert fired(TENANT_A) > 0 and fired(TENANT_B) > 0


def test_a_row_committed_just_after_a_claim_is_still_on_time(fence):
    """A create whose statement ran before the previous claim and committed after it has a
    run time before that claim: it is on time, not behind the backlog."""
    backlog(3000, timedelta(minutes=30))
    first = fire(fence, 500, since=None)
    assert first.claimed_at is not None
    late = on_time(1)[0]
    sql(
        "UPDATE schedule_t SET next_run_ts = 'epoch'::timestamptz + %s * interval '1 microsecond'"
        " - interval '500 milliseconds' WHERE schedule_id = %s",
        [first.claimed_at, late.schedule_id],
    )
    fire(fence, 500, first.claimed_at)
    assert fired(TENANT_B) == 1


@pytest.mark.parametrize("buckets", [False, True])
def test_the_backlog_probe_reads_the_due_index_not_the_table(buckets):
    """Whether anything waits before ``since`` is one probe of the due index, whatever the
    table's size. The planner cannot know ``since`` (a value computed in the statement), so
    it guesses that a third of the rows qualify; asked as a bare EXISTS it then reads the
    table until a row does: all of it when none does (245-600 ms a claim at 1,000,000
    schedules, bench/NOTES.md)."""
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_slot_ts, next_run_ts, event_topic, event_type,
            event_data)
        SELECT gen_random_uuid(), %s, 'later-' || n, 'HOURS', 1, now() + interval '1 hour',
               now() + interval '1 hour', now() + interval '1 hour', 'a', 'a.tick', '{}'
        FROM generate_series(1, 20000) AS n
        """,
        [TENANT_A],
    )
    sql("ANALYZE schedule_t")
    since = sql("SELECT (extract(epoch FROM now() - interval '1 second') * 1000000)::bigint")
    params = claim_args(1000, since[0][0])
    if buckets:
        params.update(mask=15, buckets=[0, 3, 5, 9, 12])
    with transaction.atomic():
        ((plan,),) = sql(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIMS[buckets, False, False, False],
            params,
        )
    scans = []

    def walk(node):
        scans.append((node["Node Type"], node.get("Relation Name")))
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan[0]["Plan"])
    assert ("Seq Scan", "schedule_t") not in scans, scans
    # Nothing is due: the claim reads a few index pages, not the table's hundreds.
    buffers = plan[0]["Plan"]["Shared Hit Blocks"] + plan[0]["Plan"]["Shared Read Blocks"]
    assert buffers < 50, buffers


def behind(count: int, due_ago: timedelta) -> list[Schedule]:
    """Per-second schedules of tenant B, behind by ``due_ago`` (a scheduler starting late)."""
    now = sql("SELECT now()")[0][0]
    made = on_time(count)
    Schedule.objects.filter(host_id=TENANT_B).update(
        next_run_ts=now - due_ago, next_slot_ts=now - due_ago
    )
    return made


def test_one_tenant_s_backlog_does_not_hold_up_another_s(fence):
    """A scheduler starts with tenant A 3,000 schedules behind and tenant B's ten a few
    seconds behind: both are backlog, and B's is the younger. Oldest first, B fired nothing
    until A's had drained (60 batches of 50); host by host, B's ten fire in the first batch,
    then on time in every round, and A's drain goes on at the batch's full rate."""
    backlog(3000, timedelta(minutes=30))
    behind(10, timedelta(seconds=5))
    first = fire(fence, 50, since=None)
    assert fired(TENANT_B) == 10
    assert first.claimed == 50 and fired(TENANT_A) == 40
    since = first.claimed_at
    for round_ in range(3):
        # B's schedules come due again (their next second): on time, claimed first.
        sql(
            "UPDATE schedule_t SET next_run_ts = clock_timestamp() WHERE host_id = %s",
            [TENANT_B],
        )
        result = fire(fence, 50, since)
        since = result.claimed_at
        assert result.claimed == 50  # A's backlog fills the rest of each batch
        assert fired(TENANT_B) == 10 * (round_ + 2)
    assert fired(TENANT_A) == 40 * 4


def test_several_tenants_behind_share_the_batch(fence):
    backlog(300, timedelta(minutes=30))
    backlog(300, timedelta(minutes=20), prefix="older-")
    behind(300, timedelta(minutes=10))
    fire(fence, 90, since=None)
    # A (its 600 rows one host) and B: 45 each, though every row of A is older than B's.
    assert (fired(TENANT_A), fired(TENANT_B)) == (45, 45)


def test_the_fair_share_reads_each_host_s_range_not_another_s_backlog():
    """With A's 20,000 rows due and B's ten due later, the claim's backlog reads B's rows
    through the host due index: never A's backlog to find them (the due index filtered on the
    host would read all of A's first)."""
    backlog(20_000, timedelta(minutes=30))
    behind(10, timedelta(seconds=5))
    sql("ANALYZE schedule_t")
    params = claim_args(100, None)
    with transaction.atomic():
        ((plan,),) = sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM, params)
        transaction.set_rollback(True)
    scans = []

    def walk(node):
        if node.get("Relation Name") == "schedule_t":
            kind, index = node["Node Type"], node.get("Index Name")
            scans.append((kind, index, node["Actual Rows"], node["Actual Loops"]))
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan[0]["Plan"])
    assert not [s for s in scans if s[0] in ("Seq Scan", "Bitmap Heap Scan")], scans
    read = sum(rows * loops for _, _, rows, loops in scans)
    # The batch (100) twice at most (claimed, and A's probed again by the backlog's fill),
    # and a few probes per host.
    assert read <= 250, scans
    assert plan[0]["Plan"]["Actual Rows"] == 100
