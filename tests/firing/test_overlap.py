"""The overlap policies on the fire path (firing/overlap.py), batch by batch against the real
tables: a run is an outbox message whose phases are set here as a relay or a worker would.

Each schedule is minutely, anchored an hour ago, with the CATCH_UP misfire policy, so each
batch is due for the next slot of the hour and fires (or skips, or holds) exactly one:
the slots come due without waiting.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_dsched.changes import on_demand
from django_dsched.enums import DeliveryStatus, MisfirePolicy, OverlapPolicy, ScheduleState
from django_dsched.firing.batch import fire_batch
from django_dsched.firing.claim import CLAIM, claim_args
from django_dsched.firing.fence import Fence
from django_dsched.firing.next_due import next_due
from django_dsched.history.event_ids import event_id
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.models.overlap import PREVIOUS_RUN_OF, RUN_GOING
from django_dsched.outbox import phases
from tests.cluster.test_buckets import COUNT, in_transaction, leases
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.helpers import other_session, sql
from tests.test_migrations import notifications

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = timedelta(minutes=1)


def overlapping(db_now, policy, **fields):
    start = db_now().replace(second=0, microsecond=0) - timedelta(hours=1)
    return ScheduleFactory(
        start_ts=start, misfire_policy=MisfirePolicy.CATCH_UP, overlap_policy=policy, **fields
    )


def newest(schedule):
    return OutboxMessage.objects.filter(aggregate_id=schedule.pk).order_by("-aggregate_version")[0]


def complete(message):
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now(),"
        " picked_ts = now(), started_ts = now(), completed_ts = now(), attempts = attempts + 1"
        " WHERE id = %s",
        [message.id],
    )


def claim(message, *, live=True):
    """A relay's claim of ``message``: live, or expired (its relay died mid-run)."""
    until = "now() + interval '1 minute'" if live else "now() - interval '1 second'"
    sql(
        f"UPDATE outbox_message_t SET claimed_by = 'relay-1', claimed_until = {until},"
        " attempts = attempts + 1, picked_ts = now(), started_ts = now() WHERE id = %s",
        [message.id],
    )


def audited(schedule, verb):
    return list(
        Event.objects.filter(
            aggregate_id=schedule.pk, event_type=f"dsched.schedule.{verb}"
        ).order_by("aggregate_version")
    )


def fired_slots(schedule):
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )


def looked_again(fence):
    """What the loop does after a short claim: the next due time, and whether a due row was
    passed over for a lock (a held row is not: it waits for its run, not for a lock)."""
    with transaction.atomic(), connection.cursor() as cursor:
        return next_due(cursor, fence)


def test_allow_all_fires_whatever_runs(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.ALLOW_ALL)
    assert fire(fence).fired == 1
    assert fire(fence).fired == 1  # the first run still pending
    schedule.refresh_from_db()
    assert (schedule.skip_count, schedule.buffer_count, schedule.held_by) == (0, 0, None)
    assert fired_slots(schedule) == [schedule.start_ts, schedule.start_ts + MINUTE]


def test_skip_skips_while_the_previous_run_goes_then_fires_once_it_ends(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.SKIP)
    start = schedule.start_ts
    assert fire(fence).fired == 1
    first = newest(schedule)
    result = fire(fence)
    assert (result.claimed, result.fired, result.skipped, result.again) == (1, 0, 1, 1)
    schedule.refresh_from_db()
    assert (schedule.skip_count, schedule.next_slot_ts, schedule.fire_count) == (
        1,
        start + 2 * MINUTE,
        1,
    )
    [skipped] = audited(schedule, "skipped")
    assert skipped.aggregate_version == schedule.aggregate_version
    assert skipped.payload["run"] == str(first.id)
    assert skipped.payload["slot"].startswith((start + MINUTE).isoformat()[:19])
    assert skipped.payload["policy"] == "SKIP"
    claim(first)  # picked by a relay: still going
    assert fire(fence).skipped == 1
    complete(first)
    assert fire(fence).fired == 1
    assert fired_slots(schedule) == [start, start + 3 * MINUTE]


def test_buffer_one_holds_the_slot_and_fires_it_with_its_own_id_once(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    start = schedule.start_ts
    assert fire(fence).fired == 1
    first = newest(schedule)
    result = fire(fence)
    assert (result.claimed, result.fired, result.buffered, result.again) == (1, 0, 1, 0)
    schedule.refresh_from_db()
    assert schedule.held_by == first.id
    assert schedule.next_slot_ts == start + MINUTE  # the held slot stays the next one
    assert schedule.next_run_ts <= db_now()  # still due ...
    assert fire(fence).claimed == 0  # ... but passed over while its run goes
    due = looked_again(fence)
    assert not due.locked  # waiting for a run is not waiting for a lock: no quick polling
    [buffered] = audited(schedule, "buffered")
    assert buffered.payload["run"] == str(first.id)

    complete(first)
    result = fire(fence)
    assert (result.fired, result.skipped) == (1, 1)
    schedule.refresh_from_db()
    held = start + MINUTE
    assert fired_slots(schedule) == [start, held]
    assert Event.objects.get(aggregate_id=schedule.pk, scheduled_ts=held).id == event_id(
        schedule.pk, held
    )
    # The slots that came due while it waited are dropped: on from now.
    assert schedule.held_by is None
    assert schedule.next_slot_ts > db_now() - MINUTE
    assert (schedule.buffer_count, schedule.skip_count, schedule.fire_count) == (1, 1, 2)
    assert (
        audited(schedule, "skipped")[0].payload["slot"].startswith((held + MINUTE).isoformat()[:19])
    )
    assert fire(fence).fired == 0


def test_a_run_whose_claim_expired_holds_its_schedule_no_longer(fence, db_now):
    """A relay killed mid-run stops renewing its claim: once the visibility timeout passed,
    the run does not count as going, and the held slot fires."""
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    fire(fence)
    first = newest(schedule)
    claim(first)
    assert fire(fence).buffered == 1
    assert fire(fence).claimed == 0
    claim(first, live=False)
    assert fire(fence).fired == 1
    schedule.refresh_from_db()
    assert schedule.held_by is None and schedule.fire_count == 2


def test_a_handed_off_run_goes_until_the_worker_timeout(fence, db_now, settings):
    settings.DSCHED_OVERLAP_WORKER_TIMEOUT = 600
    schedule = overlapping(db_now, OverlapPolicy.SKIP)
    fire(fence)
    first = newest(schedule)
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now(), attempts = 1"
        " WHERE id = %s",
        [first.id],
    )  # handed to a Celery worker that never reported
    assert fire(fence).skipped == 1
    sql(
        "UPDATE outbox_message_t SET delivered_ts = now() - interval '11 minutes' WHERE id = %s",
        [first.id],
    )  # its worker died long ago
    assert fire(fence).fired == 1
    # A worker's failure report ends the run too.
    second = newest(schedule)
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now(),"
        " failed_ts = now(), attempts = 1 WHERE id = %s",
        [second.id],
    )
    assert fire(fence).fired == 1


def test_cancel_other_cancels_a_run_never_attempted_and_fires(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.CANCEL_OTHER)
    start = schedule.start_ts
    fire(fence)
    first = newest(schedule)
    result = fire(fence)
    assert (result.fired, result.cancelled) == (1, 1)
    assert not OutboxMessage.objects.filter(pk=first.pk).exists()  # never delivered
    assert Event.objects.filter(pk=first.pk).exists()  # its slot fired, once
    assert fired_slots(schedule) == [start, start + MINUTE]
    [cancelled] = audited(schedule, "run_cancelled")
    assert cancelled.payload["run"] == str(first.id)


def test_cancel_other_holds_when_a_relay_takes_the_run_as_it_would_be_cancelled(fence, db_now):
    """The cancel passes over a message locked by a relay's claim (SKIP LOCKED: the fire path
    never waits for a relay): that fire is not written, its slot is held instead."""
    schedule = overlapping(db_now, OverlapPolicy.CANCEL_OTHER)
    fire(fence)
    first = newest(schedule)
    with other_session() as relay:
        sql("BEGIN", using=relay)
        sql("SELECT 1 FROM outbox_message_t WHERE id = %s FOR UPDATE", [first.id], using=relay)
        result = fire(fence)
        sql("ROLLBACK", using=relay)
    assert (result.fired, result.cancelled, result.buffered, result.again) == (0, 0, 1, 0)
    assert OutboxMessage.objects.filter(pk=first.pk).exists()
    schedule.refresh_from_db()
    assert schedule.held_by == first.id
    assert schedule.next_slot_ts == schedule.start_ts + MINUTE  # the held slot
    [held] = audited(schedule, "buffered")
    assert held.payload["run"] == str(first.id)
    assert not audited(schedule, "run_cancelled")


def test_cancel_other_holds_for_a_started_run_then_the_newest_slot_wins(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.CANCEL_OTHER)
    start = schedule.start_ts
    fire(fence)
    first = newest(schedule)
    claim(first)  # started: it cannot be cancelled
    assert fire(fence).buffered == 1
    assert fire(fence).claimed == 0
    complete(first)
    result = fire(fence)
    assert (result.fired, result.skipped) == (1, 1)
    [newest_slot] = fired_slots(schedule)[1:]
    assert newest_slot > start + 50 * MINUTE  # the latest due slot, not the held one
    assert OutboxMessage.objects.filter(pk=first.pk).exists()


def test_buffer_all_fires_each_held_slot_in_turn_within_its_limit(fence, db_now, settings):
    settings.DSCHED_OVERLAP_BUFFER_LIMIT = 3
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ALL)
    fire(fence)
    for _ in range(3):
        assert fire(fence).buffered == 1
        assert fire(fence).claimed == 0
        complete(newest(schedule))
        result = fire(fence)
        assert result.fired == 1
    schedule.refresh_from_db()
    slots = fired_slots(schedule)
    # Of the ~60 slots waiting at the first release the last 3 were kept: the oldest of
    # them fired, the others (dropped) counted once; then the two kept fired in turn.
    assert slots[2] - slots[1] == MINUTE and slots[3] - slots[2] == MINUTE
    assert slots[1] > schedule.start_ts + 50 * MINUTE
    assert (schedule.buffer_count, schedule.skip_count) == (3, 1)


def test_the_catch_up_window_drops_a_held_slot_older_than_it(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    start = schedule.start_ts
    fire(fence)
    fire(fence)  # holds start + 1 min
    Schedule.objects.filter(pk=schedule.pk).update(misfire_grace_seconds=120)
    complete(newest(schedule))
    assert fire(fence).fired == 1
    slots = fired_slots(schedule)
    assert start + MINUTE not in slots  # waited an hour: older than the window
    assert slots[1] >= db_now() - timedelta(seconds=180)
    schedule.refresh_from_db()
    assert schedule.skip_count == 1


def test_a_run_now_while_held_moves_the_hold_to_it(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    fire(fence)
    first = newest(schedule)
    fire(fence)  # held for the first run
    on_demand.trigger(Schedule.objects.get(pk=schedule.pk), actor="test")
    manual = newest(schedule)
    complete(first)
    result = fire(fence)  # the run now goes: held for it
    assert (result.fired, result.buffered) == (0, 0)
    schedule.refresh_from_db()
    assert schedule.held_by == manual.id
    complete(manual)
    assert fire(fence).fired == 1


def test_max_fires_counts_fires_not_skips(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.SKIP, max_fires=2)
    fire(fence)
    first = newest(schedule)
    for _ in range(3):
        assert fire(fence).skipped == 1
    complete(first)
    assert fire(fence).fired == 1
    schedule.refresh_from_db()
    assert (schedule.fire_count, schedule.skip_count, schedule.state) == (
        2,
        3,
        ScheduleState.COMPLETED,
    )


def test_a_dead_letter_ends_a_run(fence, db_now):
    schedule = overlapping(db_now, OverlapPolicy.SKIP)
    fire(fence)
    sql(
        "UPDATE outbox_message_t SET status = %s, failed_ts = now(), attempts = 10 WHERE id = %s",
        [DeliveryStatus.DELIVERY_FAILED, newest(schedule).id],
    )
    assert fire(fence).fired == 1


def test_a_workers_report_of_the_held_runs_end_wakes_the_scheduler(fence, db_now):
    """Handed off (Celery): the worker's report NOTIFYs the leader when a slot is held for
    that run, and only then."""
    schedule = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    other = overlapping(db_now, OverlapPolicy.BUFFER_ONE)
    fire(fence)
    handed = "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now() WHERE id = %s"
    first, unheld = newest(schedule), newest(other)
    sql(handed, [first.id])
    sql(handed, [unheld.id])
    Schedule.objects.filter(pk=other.pk).update(overlap_policy=OverlapPolicy.ALLOW_ALL)
    assert fire(fence).buffered == 1
    with other_session() as listener:
        sql("LISTEN dsched_schedules", using=listener)
        assert phases.report_completed(unheld.id)
        assert notifications(listener, 0.3) == []
        assert phases.report_completed(first.id)
        assert notifications(listener, 5) == ["dsched_schedules"]
    assert fire(fence).fired >= 1
    schedule.refresh_from_db()
    assert schedule.held_by is None


def claim_plan_and_probes() -> tuple[list[str], int]:
    """The claim's executed plan (rolled back), and how many times it called the probes."""
    with transaction.atomic():
        sql("SET LOCAL track_functions = 'pl'")
        plan = [
            row[0]
            for row in sql(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + CLAIM, claim_args(500)
            )
        ]
        ((calls,),) = sql(
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_xact_user_functions"
            " WHERE funcname IN (%s, %s)",
            [RUN_GOING, PREVIOUS_RUN_OF],
        )
        transaction.set_rollback(True)
    return plan, calls


def test_the_claim_plans_no_outbox_day_and_an_allow_all_row_calls_no_probe(db_now):
    """The claim's overlap probes are functions (planned once per session, not over every
    day partition of the outbox with each claim) in CASE branches an ALLOW_ALL row never
    takes."""
    ScheduleFactory.create_batch(20, start_ts=db_now() - timedelta(seconds=5))
    plan, calls = claim_plan_and_probes()
    assert "rows=20" in plan[0]
    assert not [line for line in plan if "outbox_message_t" in line], "\n".join(plan)
    assert calls == 0
    overlapping(db_now, OverlapPolicy.SKIP)  # a policy: its previous run is probed
    plan, calls = claim_plan_and_probes()
    assert "rows=21" in plan[0] and calls == 1


def test_with_buckets_each_step_is_fenced_and_audited_at_its_buckets_epoch(db_now):
    skip = overlapping(db_now, OverlapPolicy.SKIP)
    cancel = overlapping(db_now, OverlapPolicy.CANCEL_OTHER)
    with other_session() as session:
        holder = leases(session, "a")
        assert holder.try_acquire()
        held = sorted(holder.held)
        fence = Fence(
            1, "a", 0, 30.0, bucket_count=COUNT,
            buckets=tuple(held), epochs=tuple(holder.held[k] for k in held),
        )  # fmt: skip

        def batch():
            with in_transaction(session) as cursor:
                return fire_batch(cursor, fence, 100)

        assert batch().fired == 2
        result = batch()
        assert (result.fired, result.skipped, result.cancelled) == (1, 1, 1)
    for schedule, verb in ((skip, "skipped"), (cancel, "run_cancelled")):
        [event] = audited(schedule, verb)
        bucket = Schedule.objects.get(pk=schedule.pk).bucket_key % COUNT
        assert event.leader_epoch == holder.held[bucket]
        assert event.metadata["leader_epoch"] == holder.held[bucket]
