"""Runs of deliveries: phase timestamps, the derived status, the report hooks, the heartbeat."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from celery import Celery

from django_dsched import api
from django_dsched.contrib.celery import ExactlyOnceTask
from django_dsched.enums import DeliveryStatus, RunStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox import dead_letters, phases
from django_dsched.outbox.claims import claim
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.messages import Claimer
from django_dsched.outbox.relay import Relay
from tests.factories import ScheduleFactory
from tests.helpers import other_session, sql, wait_for
from tests.outbox.test_transports import immediate_backend
from tests.outbox_helpers import make_messages

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

pytestmark = pytest.mark.django_db(transaction=True)


@task()
def failing_task(event: dict) -> None:
    raise ValueError("the task went wrong")


@pytest.fixture
def relay_settings(relay_settings):
    """Two attempts: a second failure dead-letters."""
    relay_settings.DSCHED_RELAY_MAX_ATTEMPTS = 2
    return relay_settings


def db_now():
    return sql("SELECT clock_timestamp()")[0][0]


# -- phases written by the relay around in-process handlers --------------------------------------
def test_a_handler_run_records_picked_started_completed(relay_settings, handle):
    handle(lambda event: None, topic="reports")
    (id_,) = make_messages(1, age=2)

    assert Relay(instance_id="r1").run_until_idle() == 1

    row = OutboxMessage.objects.get(id=id_)
    assert row.event_ts < row.picked_ts <= row.started_ts <= row.completed_ts <= row.delivered_ts
    assert row.failed_ts is None
    assert phases.run_status(row) == RunStatus.SUCCEEDED
    assert phases.queue_wait(row.event_ts, row.picked_ts) >= timedelta(seconds=2)
    assert phases.run_time(row.started_ts, row.completed_ts) >= timedelta(0)


def test_run_time_is_the_handlers_time_not_the_batchs(relay_settings, handle):
    release = threading.Event()

    def slow_first(event):
        if event["data"]["n"] == 1:
            release.wait(0.5)  # a run of about half a second; the second one is instant

    handle(slow_first, topic="reports")
    first, second = make_messages(2)

    Relay(instance_id="r1").run_until_idle()

    a, b = OutboxMessage.objects.get(id=first), OutboxMessage.objects.get(id=second)
    slow = phases.run_time(a.started_ts, a.completed_ts)
    assert slow >= timedelta(seconds=0.45)
    assert phases.run_time(b.started_ts, b.completed_ts) < slow  # its own time, not the batch's
    assert b.started_ts >= a.completed_ts  # in order, one after the other


def test_a_failed_attempt_records_failed_then_a_new_claim_starts_over(relay_settings, handle):
    def fail(event):
        raise ValueError("bad input")

    handle(fail, topic="reports")
    (id_,) = make_messages(1)

    Relay(instance_id="r1").run_until_idle()

    row = OutboxMessage.objects.get(id=id_)
    assert row.status == DeliveryStatus.PENDING
    assert row.picked_ts <= row.started_ts <= row.failed_ts and row.completed_ts is None
    assert "ValueError: bad input" in row.last_error
    assert phases.run_status(row) == RunStatus.RETRYING

    sql("UPDATE outbox_message_t SET next_attempt_ts = NULL WHERE id = %s", [id_])
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, Claimer("r2", 30, 2), 10)
    assert [m.id for m in live] == [id_]
    again = OutboxMessage.objects.get(id=id_)
    assert again.picked_ts > row.failed_ts
    assert again.started_ts is None and again.failed_ts is None
    assert phases.run_status(again) == RunStatus.PICKED
    assert "ValueError: bad input" in again.last_error  # the error stays until replaced


def test_dead_letter_then_retry_clears_the_phases(relay_settings, handle):
    relay_settings.DSCHED_RELAY_MAX_ATTEMPTS = 1

    def fail(event):
        raise ValueError("bad input")

    handle(fail, topic="reports")
    (id_,) = make_messages(1)
    Relay(instance_id="r1").run_until_idle()
    row = OutboxMessage.objects.get(id=id_)
    assert row.status == DeliveryStatus.DELIVERY_FAILED and row.failed_ts is not None
    assert phases.run_status(row) == RunStatus.DEAD

    assert dead_letters.retry(OutboxMessage.objects.filter(id=id_)).changed == 1

    row = OutboxMessage.objects.get(id=id_)
    assert (row.picked_ts, row.started_ts, row.completed_ts, row.failed_ts) == (None,) * 4
    assert phases.run_status(row) == RunStatus.PENDING
    assert "ValueError: bad input" in row.last_error


def test_given_back_claims_lose_their_pick(relay_settings, handle):
    relay = Relay(instance_id="r1", batch_size=10)
    handle(lambda event: relay.stop(), topic="reports")
    make_messages(3)

    relay.run()

    rest = OutboxMessage.objects.filter(status=DeliveryStatus.PENDING)
    assert rest.count() == 2
    assert all(phases.run_status(m) == RunStatus.PENDING and m.picked_ts is None for m in rest)


# -- the heartbeat: a long handler keeps its claim -----------------------------------------------
def test_a_handler_longer_than_the_visibility_timeout_runs_once(relay_settings, handle):
    relay_settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 2.0
    relay_settings.DSCHED_RELAY_HEARTBEAT_INTERVAL = 0.25
    runs_seen: list[str] = []
    release = threading.Event()

    def long_job(event):
        runs_seen.append(threading.current_thread().name.removeprefix("dsched-send-"))
        release.wait(20)

    handle(long_job, topic="reports")
    (id_,) = make_messages(1)
    first = Relay(instance_id="r1")
    second = Relay(instance_id="r2", poll_interval=0.05)
    t1 = threading.Thread(target=first.run_until_idle, name="r1")
    t1.start()
    t2 = None
    try:
        wait_for(lambda: runs_seen, what="the first run to start")
        claimed_until = OutboxMessage.objects.get(id=id_).claimed_until
        t2 = threading.Thread(target=second.run, name="r2")
        t2.start()
        # The run goes on well past the claim's first expiry while the other relay polls.
        wait_for(
            lambda: db_now() > claimed_until + timedelta(seconds=2.5),
            timeout=30,
            what="the first claim's expiry to pass by 2.5 s",
        )
        row = OutboxMessage.objects.get(id=id_)
        assert row.claimed_by == "r1" and row.claimed_until > db_now()
        assert phases.run_status(row) == RunStatus.RUNNING and row.started_ts is not None
        assert first.heartbeat.beats >= 5
    finally:
        release.set()
        t1.join(20)
        second.stop()
        if t2 is not None:
            t2.join(20)

    assert runs_seen == ["r1"]
    row = OutboxMessage.objects.get(id=id_)
    assert row.status == DeliveryStatus.DELIVERED and row.attempts == 1
    assert phases.run_time(row.started_ts, row.completed_ts) >= timedelta(seconds=4)
    assert second.stats.claimed == 0


def test_a_hung_handler_past_the_maximum_run_gives_its_batch_up_to_another_relay(
    relay_settings, handle
):
    relay_settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 2.0
    relay_settings.DSCHED_RELAY_HEARTBEAT_INTERVAL = 0.25
    relay_settings.DSCHED_RELAY_MAX_RUN_SECONDS = 1.0
    calls: list[tuple[str, int]] = []
    release = threading.Event()

    def job(event):
        relay = threading.current_thread().name.removeprefix("dsched-send-")
        calls.append((relay, event["data"]["n"]))
        if relay == "r1":
            release.wait(30)  # hangs on the first relay only

    handle(job, topic="reports")
    ids = make_messages(2)
    first = Relay(instance_id="r1")
    second = Relay(instance_id="r2", poll_interval=0.05)
    t1 = threading.Thread(target=first.run_until_idle, name="r1")
    t2 = threading.Thread(target=second.run, name="r2")
    t1.start()
    try:
        wait_for(lambda: calls, what="the first run to start")
        t2.start()
        # r1 gives the hung send's claim up (it expires, and r2 sends it again: a second
        # attempt) and the message queued behind it back at once (its attempt not counted).
        wait_for(
            lambda: (
                OutboxMessage.objects.filter(id__in=ids, status=DeliveryStatus.DELIVERED).count()
                == 2
            ),
            timeout=30,
            what="the other relay to deliver the batch r1 gave up",
        )
    finally:
        release.set()
        t1.join(20)
        second.stop()
        if t2.is_alive():
            t2.join(20)

    assert sorted(calls) == [("r1", 1), ("r2", 1), ("r2", 2)]  # r1 never sent the second
    rows = {r.id: r for r in OutboxMessage.objects.filter(id__in=ids)}
    # Delivered by r2's attempt; r1's late outcome was fenced out.
    assert (rows[ids[0]].status, rows[ids[0]].attempts) == (DeliveryStatus.DELIVERED, 2)
    assert (rows[ids[1]].status, rows[ids[1]].attempts) == (DeliveryStatus.DELIVERED, 1)


def test_without_a_maximum_run_the_heartbeat_never_gives_up(relay_settings):
    ids = make_messages(1)
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
    beat = ClaimHeartbeat(Claimer("r1", 30, 5), 60, "default", max_run=None)
    try:
        beat.hold(live)
        beat.running(1, ids, 0.0)  # send 1 runs since the monotonic clock's origin
        beat.beat()
        assert beat.lost() == set() and beat.beats == 1
        beat.max_run = 5.0
        beat.beat()
        assert beat.lost() == set(ids) and beat.beats == 1  # given up: nothing renewed
    finally:
        beat.stop()


def test_the_heartbeat_never_extends_a_claim_another_relay_took(relay_settings):
    (id_,) = make_messages(1)
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, Claimer("r1", 30, 5), 10)
    # r1's claim expired and r2 took the message over (a new attempt).
    sql("UPDATE outbox_message_t SET claimed_until = clock_timestamp() WHERE id = %s", [id_])
    with other_session() as session, session.cursor() as cursor:
        taken, _ = claim(cursor, Claimer("r2", 5, 5), 10)
    assert [m.id for m in taken] == [id_]
    (before,) = sql("SELECT claimed_until FROM outbox_message_t WHERE id = %s", [id_])[0]

    beat = ClaimHeartbeat(Claimer("r1", 300, 5), 60, "default")
    try:
        beat.hold(live)
        beat.beat()
        assert beat.lost() == {id_}
    finally:
        beat.stop()
    row = OutboxMessage.objects.get(id=id_)
    assert row.claimed_by == "r2" and row.claimed_until == before and row.attempts == 2


def test_the_heartbeat_renews_every_unsettled_claim_of_the_batch(relay_settings):
    ids = make_messages(3)
    with other_session() as session, session.cursor() as cursor:
        live, _ = claim(cursor, Claimer("r1", 1, 5), 10)
    beat = ClaimHeartbeat(Claimer("r1", 300, 5), 0.1, "default")
    try:
        beat.hold(live)
        beat.drop([ids[2]])  # settled: no more renewals
        wait_for(lambda: beat.beats >= 1, what="a heartbeat")
    finally:
        beat.stop()
    until = dict(sql("SELECT id, claimed_until FROM outbox_message_t"))
    now = db_now()
    assert until[ids[0]] > now + timedelta(seconds=200)
    assert until[ids[1]] > now + timedelta(seconds=200)
    assert until[ids[2]] < now + timedelta(seconds=2)


# -- outcomes reported from workers ------------------------------------------------------------
def test_report_hooks_are_idempotent(relay_settings):
    (id_,) = make_messages(1, status=DeliveryStatus.DELIVERED)

    assert phases.report_started(id_)
    first = OutboxMessage.objects.get(id=id_).started_ts
    assert phases.report_started(str(id_))  # again: nothing moves
    row = OutboxMessage.objects.get(id=id_)
    assert row.started_ts == first and phases.run_status(row) == RunStatus.RUNNING

    assert phases.report_failed(id_, "RuntimeError: boom")
    row = OutboxMessage.objects.get(id=id_)
    assert phases.run_status(row) == RunStatus.FAILED and row.last_error == "RuntimeError: boom"

    assert phases.report_started(id_)  # the worker retries: running again
    row = OutboxMessage.objects.get(id=id_)
    assert row.started_ts > first and row.failed_ts is None
    assert phases.run_status(row) == RunStatus.RUNNING

    assert phases.report_completed(id_)
    done = OutboxMessage.objects.get(id=id_)
    assert phases.report_completed(id_)
    assert phases.report_failed(id_, "late")  # after completion: ignored
    assert phases.report_started(id_)
    row = OutboxMessage.objects.get(id=id_)
    assert row.completed_ts == done.completed_ts and row.failed_ts is None
    assert row.last_error == "RuntimeError: boom"
    assert phases.run_status(row) == RunStatus.SUCCEEDED


def test_a_workers_error_is_stored_readable(relay_settings):
    (id_,) = make_messages(1)
    assert phases.report_failed(id_, "RuntimeError: bad\x00reply \udcff" + "x" * 5000)
    error = OutboxMessage.objects.get(id=id_).last_error
    assert error.startswith("RuntimeError: bad\\x00reply \\udcffxxx") and len(error) == 2000


def test_report_hooks_ignore_unknown_ids(relay_settings):
    assert phases.report_started(uuid.uuid4()) is False
    assert phases.report_completed("not-a-uuid") is False
    assert phases.report_failed("celery-task-1", "x") is False


def test_django_tasks_report_the_run_back(relay_settings):
    relay_settings.TASKS = {"default": {"BACKEND": immediate_backend()}}
    relay_settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "tasks",
            "OPTIONS": {
                "TASKS": {
                    "report.build": "tests.outbox.test_transports.record_event",
                    "report.fail": "tests.outbox.test_phases.failing_task",
                }
            },
        }
    }
    (ok,) = make_messages(1)
    (bad,) = make_messages(1, event_type="report.fail")

    assert Relay(instance_id="r1").run_until_idle() == 2

    done = OutboxMessage.objects.get(id=ok)
    assert done.status == DeliveryStatus.DELIVERED
    assert done.picked_ts <= done.started_ts <= done.completed_ts
    assert phases.run_status(done) == RunStatus.SUCCEEDED
    failed = OutboxMessage.objects.get(id=bad)
    assert failed.status == DeliveryStatus.DELIVERED  # handed off: the task ran, and failed
    assert failed.failed_ts is not None and failed.completed_ts is None
    assert "ValueError" in failed.last_error and "the task went wrong" in failed.last_error
    assert phases.run_status(failed) == RunStatus.FAILED


def test_a_handed_off_message_waits_for_its_worker(relay_settings):
    relay_settings.TASKS = {"default": {"BACKEND": dummy_backend()}}
    relay_settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "tasks",
            "OPTIONS": {"TASKS": {"report.build": "tests.outbox.test_transports.record_event"}},
        }
    }
    (id_,) = make_messages(1)

    assert Relay(instance_id="r1").run_until_idle() == 1

    row = OutboxMessage.objects.get(id=id_)
    assert row.status == DeliveryStatus.DELIVERED and row.picked_ts is not None
    assert row.started_ts is None and row.completed_ts is None
    assert phases.run_status(row) == RunStatus.HANDED_OFF


def dummy_backend() -> str:
    return immediate_backend().replace("immediate.ImmediateBackend", "dummy.DummyBackend")


celery_app = Celery("runs-tests", set_as_current=False)


@celery_app.task(base=ExactlyOnceTask, name="tests.runs.work")
def work(fail: bool = False) -> str:
    if fail:
        raise RuntimeError("worker says no")
    return "ok"


def test_exactly_once_task_reports_its_run(relay_settings):
    ok, bad = make_messages(2, status=DeliveryStatus.DELIVERED)

    assert work.apply(task_id=str(ok)).get() == "ok"
    with pytest.raises(RuntimeError):
        work.apply(kwargs={"fail": True}, task_id=str(bad)).get()

    row = OutboxMessage.objects.get(id=ok)
    assert row.started_ts <= row.completed_ts and phases.run_status(row) == RunStatus.SUCCEEDED
    row = OutboxMessage.objects.get(id=bad)
    assert row.failed_ts is not None and row.last_error == "RuntimeError: worker says no"
    assert phases.run_status(row) == RunStatus.FAILED

    # A re-sent id is skipped; its run had completed, and stays so.
    completed = OutboxMessage.objects.get(id=ok).completed_ts
    assert work.apply(task_id=str(ok)).get() is None
    assert OutboxMessage.objects.get(id=ok).completed_ts == completed


# -- api.status --------------------------------------------------------------------------------
def test_status_shows_the_newest_runs_phases(relay_settings, handle):
    handle(lambda event: None, topic="reports")
    schedule = ScheduleFactory(event_topic="reports")
    assert api.status(schedule.schedule_id).last_run is None
    sql(
        "UPDATE schedule_t SET next_run_ts = clock_timestamp() WHERE schedule_id = %s",
        [schedule.schedule_id],
    )
    from django_dsched.scheduler import Scheduler

    assert Scheduler(instance_id="leader").run_until_idle() == 1
    assert api.status(schedule.schedule_id).last_run == RunStatus.PENDING

    Relay(instance_id="r1").run_until_idle()

    status = api.status(schedule.schedule_id)
    row = OutboxMessage.objects.get(aggregate_id=schedule.schedule_id)
    assert status.last_run == RunStatus.SUCCEEDED
    assert (status.last_picked, status.last_started, status.last_completed) == (
        row.picked_ts,
        row.started_ts,
        row.completed_ts,
    )
    assert status.last_failed is None
