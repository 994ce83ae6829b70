"""Each health state, judged from what the fire path, the relay and the workers record, and
the same judgment by every reader: one schedule, a filtered list, the counts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched import api
from django_dsched.enums import DeliveryStatus, FrequencyUnit, Health, ScheduleState
from django_dsched.health import counts, judge
from django_dsched.models import OutboxMessage, Schedule, ScheduleHealth
from django_dsched.outbox import phases, run_health
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports import PermanentDeliveryError
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def db_now():
    return sql("SELECT clock_timestamp()")[0][0]


def due(**fields) -> Schedule:
    """An hourly schedule whose first slot is due now."""
    return ScheduleFactory(
        start_ts=db_now() - timedelta(seconds=1), frequency_unit=FrequencyUnit.HOURS, **fields
    )


def fire() -> int:
    return Scheduler(instance_id="leader").run_until_idle()


def deliver() -> None:
    Relay(instance_id="relay").run_until_idle()


def health_of(schedule: Schedule) -> judge.Verdict:
    return judge.judge(schedule)


def every_reader_agrees(*schedules: Schedule) -> None:
    """The filter of each state finds exactly the schedules the judgment puts in it, and the
    counts count them."""
    verdicts = {s.pk: health_of(s).state for s in schedules}
    for state in Health.values:
        found = set(
            judge.filter_health(Schedule.objects.filter(pk__in=verdicts), state).values_list(
                "pk", flat=True
            )
        )
        assert found == {pk for pk, v in verdicts.items() if v == state}, state
    counted: dict[str, int] = {}
    for state, _topic, n in counts.read_counts(1000):
        counted[state] = counted.get(state, 0) + n
    for state in counts.COUNTED:
        assert counted.get(state, 0) == list(verdicts.values()).count(state), state


def test_new_ok_late_paused_set_aside_ended(relay_settings, handle):
    handle(lambda event: None, topic="reports")
    now = db_now()
    new = ScheduleFactory(start_ts=now + timedelta(hours=1))
    ok = due()
    assert fire() == 1
    deliver()
    late = ScheduleFactory(start_ts=now - timedelta(minutes=5), frequency_unit="HOURS")
    patient = ScheduleFactory(
        start_ts=now - timedelta(minutes=5), frequency_unit="HOURS", health_grace_seconds=3600
    )
    paused = ScheduleFactory(start_ts=now + timedelta(hours=1), paused=True, paused_reason="x")
    resume_missed = ScheduleFactory(
        start_ts=now + timedelta(hours=1), paused=True, paused_until=now - timedelta(minutes=3)
    )
    aside = ScheduleFactory(
        start_ts=now, state=ScheduleState.SET_ASIDE, set_aside_reason="bad zone"
    )
    aside.set_aside_ts = now
    aside.save()
    ended = ScheduleFactory(start_ts=now, cancelled=True)

    expected = {
        new: Health.NEW,
        ok: Health.OK,
        late: Health.LATE,
        patient: Health.NEW,
        paused: Health.PAUSED,
        resume_missed: Health.LATE,
        aside: Health.SET_ASIDE,
        ended: Health.ENDED,
    }
    for schedule, state in expected.items():
        assert health_of(schedule).state == state, schedule.schedule_name
    every_reader_agrees(*expected)

    verdict = health_of(late)
    assert verdict.since == late.next_run_ts + timedelta(seconds=60)
    assert "has not fired" in verdict.reason
    assert health_of(resume_missed).since == resume_missed.paused_until + timedelta(seconds=60)
    assert health_of(aside).error == "bad zone"
    assert not ScheduleHealth.objects.exists()  # successes of unmonitored schedules: no row


def test_a_handler_that_always_fails_makes_its_schedule_failing_until_a_success(
    relay_settings, handle
):
    outcome = {"fail": True}

    def handler(event):
        if outcome["fail"]:
            raise RuntimeError("the report server is down")

    handle(handler, topic="reports")
    failing = due()
    tolerant = due(failure_tolerance=5)
    assert fire() == 2
    deliver()

    verdict = health_of(failing)
    assert verdict.state == Health.FAILING
    assert "1 failed runs in a row" in verdict.reason
    assert verdict.error == "RuntimeError: the report server is down"
    row = ScheduleHealth.objects.get(pk=failing.pk)
    assert row.failures == 1 and verdict.since == row.failing_since_ts == row.last_failure_ts
    assert health_of(tolerant).state == Health.OK  # 1 failure of 5 tolerated
    every_reader_agrees(failing, tolerant)

    OutboxMessage.objects.update(next_attempt_ts=None)
    deliver()  # the retries fail too
    assert ScheduleHealth.objects.get(pk=failing.pk).failures >= 2
    assert ScheduleHealth.objects.get(pk=failing.pk).failing_since_ts == row.failing_since_ts

    outcome["fail"] = False
    OutboxMessage.objects.update(next_attempt_ts=None)
    deliver()
    assert health_of(failing).state == Health.OK
    recovered = ScheduleHealth.objects.get(pk=failing.pk)
    assert recovered.failures == 0 and recovered.failing_since_ts is None
    assert recovered.last_success_ts is not None


def test_dead_letters_count_as_failures(relay_settings, handle):
    def refuse(event):
        raise PermanentDeliveryError("no such customer")

    handle(refuse, topic="reports")
    schedule = due()
    fire()
    deliver()
    assert OutboxMessage.objects.get().status == DeliveryStatus.DELIVERY_FAILED
    assert health_of(schedule).state == Health.FAILING


def test_a_worker_failure_is_not_undone_by_the_next_hand_off(db):
    """Hands-off transports: the relay's delivery hands the work to a worker, whose reports
    are the run's outcome; a worker's failure stays until a worker completes a run."""
    schedule = due()
    fire()
    message = OutboxMessage.objects.get()
    assert phases.report_started(message.pk)
    assert phases.report_failed(message.pk, "ValueError: bad input")
    assert phases.report_failed(message.pk, "ValueError: bad input")  # the same failure again
    row = ScheduleHealth.objects.get(pk=schedule.pk)
    assert (row.failures, row.worker_failure, row.last_error) == (1, True, "ValueError: bad input")
    assert health_of(schedule).state == Health.FAILING

    # A hand-off of a later run, as the settle records it (delivered, no phases: the
    # relay did not run it).
    sql(
        "WITH settled AS (SELECT %s::uuid AS schedule_id, 9 AS version, false AS failed,"
        " true AS handed_off, clock_timestamp() AS outcome_ts, NULL::text AS error),"
        + run_health.after_settle("settled").lstrip()
        + " SELECT 1",
        [schedule.pk],
    )
    assert ScheduleHealth.objects.get(pk=schedule.pk).failures == 1
    assert health_of(schedule).state == Health.FAILING

    assert phases.report_completed(message.pk)
    row = ScheduleHealth.objects.get(pk=schedule.pk)
    assert (row.failures, row.worker_failure) == (0, False) and row.last_success_ts
    assert health_of(schedule).state == Health.OK


def test_a_run_longer_than_its_maximum_is_stuck_until_a_later_run_finishes(db):
    schedule = due(max_runtime_seconds=60)
    fire()
    message = OutboxMessage.objects.get()
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = clock_timestamp(),"
        " started_ts = clock_timestamp() - interval '10 minutes' WHERE id = %s",
        [message.pk],
    )
    verdict = health_of(schedule)
    assert verdict.state == Health.STUCK
    started = OutboxMessage.objects.get().started_ts
    assert verdict.since == started + timedelta(seconds=60)
    roomy = due(max_runtime_seconds=3600)
    fire()
    sql(
        "UPDATE outbox_message_t SET started_ts = clock_timestamp() - interval '10 minutes'"
        " WHERE aggregate_id = %s",
        [roomy.pk],
    )
    assert health_of(roomy).state == Health.OK  # 10 minutes of an hour allowed
    every_reader_agrees(schedule, roomy)

    # A later run of the stuck schedule finishes: the old one was abandoned, not stuck.
    api.trigger(schedule)
    newer = OutboxMessage.objects.filter(aggregate_id=schedule.pk).order_by("-aggregate_version")[0]
    assert phases.report_completed(newer.pk)
    assert health_of(schedule).state == Health.OK


def test_monitored_schedules_record_every_success(relay_settings, handle):
    handle(lambda event: None, topic="reports")
    watched = due(monitored=True)
    other = due()
    fire()
    deliver()
    row = ScheduleHealth.objects.get()
    assert row.schedule_id == watched.pk and row.failures == 0 and row.last_success_ts
    total, shown = counts.read_monitored(10)
    assert total == 1 and [m.schedule_id for m in shown] == [watched.pk]
    assert shown[0].last_success == row.last_success_ts
    assert shown[0].state == Health.OK and shown[0].interval_seconds == 3600
    assert not ScheduleHealth.objects.filter(pk=other.pk).exists()


def test_api_status_and_dsched_list_unhealthy_and_show(db, capsys):
    from io import StringIO

    from django.core.management import call_command

    now = db_now()
    late = ScheduleFactory(
        schedule_name="late-one", start_ts=now - timedelta(minutes=5), frequency_unit="HOURS"
    )
    ScheduleFactory(schedule_name="new-one", start_ts=now + timedelta(hours=1))
    ScheduleFactory(schedule_name="paused-one", start_ts=now, paused=True)

    status = api.status(late)
    assert status.health == Health.LATE
    assert status.health_since == late.next_run_ts + timedelta(seconds=60)
    assert "has not fired" in status.health_reason
    assert api.status("new-one").health == Health.NEW
    assert [s.schedule_name for s in api.schedules(health=api.UNHEALTHY)] == ["late-one"]
    assert [s.schedule_name for s in api.schedules(health="PAUSED")] == ["paused-one"]

    def run(*args: str) -> str:
        out = StringIO()
        call_command("dsched", *args, stdout=out)
        return out.getvalue()

    listed = run("list", "--unhealthy").splitlines()
    assert len(listed) == 1 and listed[0].startswith("late-one")
    assert "health: LATE since " in listed[0] and "has not fired" in listed[0]
    assert "paused-one" in run("list", "--health", "PAUSED")
    assert "health: " not in run("list")  # the plain list is as it was
    assert "health     NEW" in run("show", "new-one")


def test_every_door_of_the_python_api_takes_the_thresholds(db):
    one = api.create_interval(
        "one", every=1, topic="t", event_type="x", monitored=True, failure_tolerance=3
    )
    [two] = api.bulk_create(
        [api.Interval(name="two", every=1, topic="t", event_type="x", max_runtime_seconds=9)]
    )
    one.refresh_from_db()
    two = Schedule.objects.get(schedule_name="two")
    assert (one.monitored, one.failure_tolerance, two.max_runtime_seconds) == (True, 3, 9)
    with pytest.raises(api.ValidationError) as refused:
        api.create_interval("bad", every=1, topic="t", event_type="x", health_grace_seconds=-1)
    assert "health_grace_seconds" in refused.value.message_dict
    with pytest.raises(api.BulkValidationError):
        api.bulk_create(
            [api.Interval(name="bad", every=1, topic="t", event_type="x", failure_tolerance=-1)]
        )


def test_a_declared_schedule_takes_the_thresholds(db):
    from django_dsched import declared

    spec = {"every": 5, "topic": "t", "event_type": "x", "monitored": True}
    declared.sync({"watched": {**spec, "max_runtime_seconds": 30}})
    watched = Schedule.objects.get(schedule_name="watched")
    assert (watched.monitored, watched.max_runtime_seconds) == (True, 30)
    declared.sync({"watched": {**spec, "monitored": False}})  # a change of the declaration
    watched.refresh_from_db()
    assert watched.monitored is False
