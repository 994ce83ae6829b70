"""The overlap policies end to end (docs/overlap.md): a real scheduler, driven a round at a
time, and a real relay on a thread of its own, running an in-process handler that blocks
until the test releases it. Schedules fire every second, so slots come due while a run
goes; every wait is for a state (tests/helpers.wait_for)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.handlers import registry
from django_dsched.history.event_ids import event_id
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Job:
    """The handler: records each run (its event id, start and end), and blocks the runs
    ``block`` says to until :meth:`release`."""

    def __init__(self, block=lambda n: n == 0, fail: bool = False) -> None:
        self.block = block
        self.fail = fail
        self.runs: list[dict] = []
        self.released = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        with self.lock:
            run = {"id": event["id"], "slot": event["scheduledtime"], "ended": None}
            self.runs.append(run)
            n = len(self.runs) - 1
        if self.block(n):
            self.released.wait(30)
        run["ended"] = True
        if self.fail:
            raise RuntimeError("the job failed")

    def release(self) -> None:
        self.released.set()

    def running(self) -> int:
        return sum(1 for run in self.runs if run["ended"] is None)


@pytest.fixture
def job(settings) -> Iterator[Job]:
    settings.DSCHED_TRANSPORTS = {"jobs": {"BACKEND": "handlers"}}
    settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 30.0
    settings.DSCHED_RELAY_HEARTBEAT_INTERVAL = 0.2
    settings.DSCHED_RELAY_RETRY_BASE = 0.0
    settings.DSCHED_RELAY_RETRY_MAX = 0.0
    work = Job()
    registry.register(work, topic="jobs")
    yield work
    work.release()
    registry.unregister(work, topic="jobs")


@pytest.fixture
def relay(job) -> Iterator[Relay]:
    """A relay running on a thread of its own, polling often."""
    running = Relay(instance_id="relay-1", poll_interval=0.05)
    thread = threading.Thread(target=running.run, name="relay-1")
    thread.start()
    yield running
    job.release()
    running.stop()
    thread.join(30)


@pytest.fixture
def scheduler() -> Scheduler:
    return Scheduler(instance_id="scheduler-1", batch_size=100)


def every_second(name: str, **options) -> Schedule:
    return api.create_interval(
        name, every=1, unit="SECONDS", topic="jobs", event_type="job.run", **options
    )


def fired(schedule: Schedule) -> list:
    return list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("id", "scheduled_ts")
    )


def rounds(scheduler: Scheduler, until, what: str, timeout: float = 15.0):
    """Run the scheduler a round at a time until ``until()`` holds."""

    def once():
        scheduler.run_until_idle()
        return until()

    return wait_for(once, timeout=timeout, what=what)


def reloaded(schedule: Schedule) -> Schedule:
    return Schedule.objects.get(pk=schedule.pk)


def test_skip_skips_while_the_run_goes_then_fires_once_it_completes(job, relay, scheduler):
    schedule = every_second("skip", overlap_policy="SKIP")
    rounds(scheduler, lambda: job.runs, "the first run to start")
    rounds(scheduler, lambda: reloaded(schedule).skip_count >= 2, "two slots skipped")
    assert len(fired(schedule)) == 1  # nothing fired while the run went
    assert job.running() == 1
    skipped = Event.objects.filter(aggregate_id=schedule.pk, event_type="dsched.schedule.skipped")
    assert skipped.count() == reloaded(schedule).skip_count
    assert {e.payload["run"] for e in skipped} == {job.runs[0]["id"]}
    job.release()
    rounds(scheduler, lambda: len(job.runs) == 2, "a fire after the run completed")
    (first_id, first_slot), (second_id, second_slot) = fired(schedule)[:2]
    assert second_slot - first_slot >= timedelta(seconds=3)  # the slots between: skipped
    assert [run["id"] for run in job.runs] == [str(first_id), str(second_id)]
    first = OutboxMessage.objects.get(pk=first_id)
    assert first.status == DeliveryStatus.DELIVERED and first.completed_ts is not None


def test_buffer_one_fires_the_held_slot_after_completion_with_its_own_id_once(
    job, relay, scheduler
):
    schedule = every_second("buffer-one", overlap_policy="BUFFER_ONE")
    rounds(scheduler, lambda: job.runs, "the first run to start")
    rounds(scheduler, lambda: reloaded(schedule).held_by is not None, "a slot held")
    held = reloaded(schedule)
    held_slot = held.next_slot_ts
    assert held.held_by == OutboxMessage.objects.get().pk and held.buffer_count == 1
    # More slots come due while it waits: they do not fire, and nothing more is held.
    rounds(scheduler, lambda: _later(held_slot, 2), "two more slots to come due")
    assert len(fired(schedule)) == 1 and reloaded(schedule).buffer_count == 1
    job.release()
    rounds(scheduler, lambda: len(job.runs) == 2, "the held slot's run")
    slots = dict((slot, id_) for id_, slot in fired(schedule))
    assert slots[held_slot] == event_id(schedule.pk, held_slot)  # its own id
    assert job.runs[1]["id"] == str(event_id(schedule.pk, held_slot))
    after = reloaded(schedule)
    assert after.held_by is None and after.skip_count >= 1
    assert after.next_slot_ts > held_slot + timedelta(seconds=1)  # on from the release
    assert Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts=held_slot).count() == 1


def _later(slot, seconds: float) -> bool:
    from django_dsched.runtime.clock import database_now

    return database_now() > slot + timedelta(seconds=seconds)


def test_a_relay_that_dies_mid_run_blocks_its_schedule_no_longer_than_its_claim(
    job, settings, scheduler
):
    """The relay's claim is its run's sign of life: a dead relay stops renewing it, and
    once the visibility timeout passed the schedule fires again."""
    settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 2.0
    schedule = every_second("dead-relay", overlap_policy="BUFFER_ONE")
    dying = Relay(instance_id="relay-dying", poll_interval=0.05)

    def one_batch() -> None:
        try:
            dying.step()
            # Its send has the message (a stop before that gives back what was not started).
            wait_for(lambda: job.runs, timeout=30, what="the run to start")
        finally:
            dying.shutdown()  # on its own thread: its connection

    thread = threading.Thread(target=one_batch, name="relay-dying")
    try:
        rounds(scheduler, lambda: fired(schedule), "the first fire")
        thread.start()
        wait_for(lambda: job.runs, what="the run to start")
        rounds(scheduler, lambda: reloaded(schedule).held_by is not None, "a slot held")
        dying.heartbeat.stop()  # the relay's process dies: nothing renews its claim now
        first = OutboxMessage.objects.get()
        rounds(scheduler, lambda: len(fired(schedule)) >= 2, "a fire after the claim expired")
        second = OutboxMessage.objects.filter(aggregate_version__gt=first.aggregate_version)
        assert second.order_by("aggregate_version")[0].event_ts > first.claimed_until
        # No longer held for the dead relay's run (a later slot may be held for the new
        # run, which no relay takes here).
        assert reloaded(schedule).held_by != first.id
    finally:
        job.release()
        thread.join(30)


@pytest.fixture
def failing(job, settings) -> Job:
    """Every run fails at once; two attempts (set before the relay starts)."""
    settings.DSCHED_RELAY_MAX_ATTEMPTS = 2
    job.block, job.fail = (lambda n: False), True
    return job


def test_pause_on_failure_pauses_after_the_dead_letter(failing, relay, scheduler):
    job = failing
    schedule = every_second("fragile", pause_on_failure=True, overlap_policy="SKIP")
    rounds(
        scheduler,
        lambda: reloaded(schedule).state == ScheduleState.PAUSED,
        "the schedule to pause after its first run's dead letter",
    )
    [message] = OutboxMessage.objects.filter(aggregate_id=schedule.pk)
    assert message.status == DeliveryStatus.DELIVERY_FAILED and message.attempts == 2
    assert len(job.runs) == 2  # both attempts, then the pause
    assert str(message.pk) in reloaded(schedule).paused_reason
    scheduler.run_until_idle()
    assert len(fired(schedule)) == 1  # paused: no more fires


def test_the_catch_up_window_skips_a_held_slot_older_than_it(job, relay, scheduler):
    schedule = every_second("window", overlap_policy="BUFFER_ONE", misfire_grace_seconds=1)
    rounds(scheduler, lambda: job.runs, "the first run to start")
    rounds(scheduler, lambda: reloaded(schedule).held_by is not None, "a slot held")
    held_slot = reloaded(schedule).next_slot_ts
    rounds(scheduler, lambda: _later(held_slot, 3), "the held slot to age past the window")
    job.release()
    rounds(scheduler, lambda: len(job.runs) == 2, "the next run")
    slots = [slot for _id, slot in fired(schedule)]
    assert held_slot not in slots  # older than the window when its run ended
    assert slots[1] > held_slot + timedelta(seconds=2)
    assert reloaded(schedule).skip_count >= 1
