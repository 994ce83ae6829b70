from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from django_dsched import api
from django_dsched.changes import edits, on_demand, pause_ends
from django_dsched.enums import MisfirePolicy, ScheduleState
from django_dsched.exceptions import NotPermitted
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.scheduler import Scheduler
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "reports", "event_type": "report.build"}


def fire_all() -> int:
    return Scheduler(instance_id="test").run_until_idle()


def history(schedule) -> list[tuple[int, str]]:
    return list(
        Event.objects.filter(aggregate_id=schedule.pk)
        .order_by("aggregate_version")
        .values_list("aggregate_version", "event_type")
    )


def test_a_schedule_created_in_a_rolled_back_transaction_never_exists():
    with pytest.raises(RuntimeError), transaction.atomic():
        api.create_interval("ghost", every=1, **COMMON)
        raise RuntimeError("the caller's work failed")
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


@pytest.mark.parametrize(
    ("create", "kwargs", "fragment"),
    [
        (api.create_cron, {"cron": "61 * * * *"}, "Invalid cron"),
        (api.create_cron, {"cron": "0 0 * * *", "time_zone": "Mars/Base"}, "IANA"),
        (api.create_cron, {"cron": "0 0 30 2 *"}, "never fire"),
        (api.create_interval, {"every": 0}, "greater than or equal to 1"),
        (api.create_interval, {"every": -3}, "greater than or equal to 1"),
        (api.create_interval, {"every": 5, "unit": "FORTNIGHTS"}, "is not one of SECONDS"),
        (api.create_interval, {"every": 1, "start": datetime(2026, 1, 1)}, "timezone-aware"),
        (
            api.create_interval,
            {
                "every": 1,
                "start": datetime(2026, 1, 2, tzinfo=UTC),
                "end": datetime(2026, 1, 1, tzinfo=UTC),
            },
            "end must be after",
        ),
        (api.create_interval, {"every": 1, "max_fires": 0}, "greater than or equal to 1"),
        (api.create_interval, {"every": 1, "data": {"x": "y" * 70_000}}, "limit is 65536"),
        (api.create_interval, {"every": 1, "data": ["not", "an", "object"]}, "JSON object"),
        (api.create_interval, {"every": 1, "jitter_seconds": -1}, "greater than or equal to 0"),
        (api.create_once, {"at": datetime(2026, 1, 1)}, "timezone-aware"),
        (api.create_once, {}, "either at= or delay="),
        (api.create_once, {"delay": timedelta(seconds=-1)}, "must not be negative"),
    ],
)
def test_bad_input_is_refused_with_nothing_written(create, kwargs, fragment):
    with pytest.raises(ValidationError) as excinfo:
        create("bad", **COMMON, **kwargs)
    assert fragment in " ".join(excinfo.value.messages)
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


def test_pause_with_reason_until_a_time_then_resumes_by_itself(db_now):
    schedule = api.create_interval("p", every=1, **COMMON)
    until = db_now() + timedelta(hours=1)
    assert api.pause(schedule, reason="maintenance", until=until, actor="ops")
    status = api.status("p")
    assert (status.state, status.paused_reason, status.paused_until) == (
        ScheduleState.PAUSED,
        "maintenance",
        until,
    )
    assert pause_ends.resume_expired_pauses().resumed == 0
    sql("UPDATE schedule_t SET paused_until = now() - interval '1 second'")
    assert pause_ends.resume_expired_pauses().resumed == 1
    assert api.status("p").state == ScheduleState.ACTIVE
    assert [kind for _, kind in history(schedule)] == [
        "dsched.schedule.created",
        "dsched.schedule.paused",
        "dsched.schedule.resumed",
    ]


def test_pause_refuses_bad_input(db_now):
    api.create_interval("p", every=1, **COMMON)
    with pytest.raises(ValidationError, match="future"):
        api.pause("p", until=db_now() - timedelta(minutes=1))
    with pytest.raises(ValidationError, match="timezone-aware"):
        api.pause("p", until=datetime(2030, 1, 1))
    assert api.status("p").state == ScheduleState.ACTIVE


def test_resume_goes_on_from_now_by_default():
    schedule = api.create_interval("r", every=1, **COMMON)
    api.pause(schedule)
    sql(
        "UPDATE schedule_t SET start_ts = start_ts - interval '1 hour',"
        " next_slot_ts = next_slot_ts - interval '1 hour',"
        " next_run_ts = next_run_ts - interval '1 hour'"
    )
    api.resume("r")
    assert fire_all() == 0


def test_resume_with_catch_up_applies_the_misfire_policy():
    schedule = api.create_interval("r", every=1, misfire_policy=MisfirePolicy.CATCH_UP, **COMMON)
    api.pause(schedule)
    sql(
        "UPDATE schedule_t SET start_ts = start_ts - interval '5 minutes',"
        " next_slot_ts = next_slot_ts - interval '5 minutes',"
        " next_run_ts = next_run_ts - interval '5 minutes'"
    )
    api.resume("r", catch_up=True)
    assert fire_all() == 6


def test_trigger_fires_once_now_through_the_outbox():
    schedule = api.create_interval("t", every=1, unit="HOURS", **COMMON)
    sql("UPDATE schedule_t SET next_run_ts = now() + interval '1 hour'")
    assert api.trigger("t", actor="alice") == 1
    event = Event.objects.get(scheduled_ts__isnull=False)
    assert event.metadata["trigger"] == "manual"
    assert event.metadata["actor"] == "alice"
    assert OutboxMessage.objects.get().id == event.id
    schedule.refresh_from_db()
    assert schedule.fire_count == 1
    assert [v for v, _ in history(schedule)] == [1, 2]


def test_trigger_refuses_a_cancelled_schedule():
    api.create_interval("c", every=1, **COMMON)
    api.cancel("c")
    with pytest.raises(ValidationError, match="Only active or paused"):
        api.trigger("c")
    assert not OutboxMessage.objects.exists()


def test_backfill_fires_each_past_slot_once(db_now):
    # The latest slot a minute ago: backlog, not a slot that came due within the window.
    start = db_now() - timedelta(hours=5, minutes=1)
    schedule = api.create_interval("b", every=1, unit="HOURS", start=start, **COMMON)
    fire_all()  # the latest missed slot fires now (coalesce)
    # The latest slot (start + 5 h) already fired; the backfill fires the five before it.
    fired, already = api.backfill("b", start, start + timedelta(hours=5))
    assert (fired, already) == (5, 1)
    assert api.backfill("b", start, start + timedelta(hours=5)) == (0, 6)
    scheduled = list(
        Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )
    assert scheduled == [start + timedelta(hours=k) for k in range(6)]
    versions = [v for v, _ in history(schedule)]
    assert len(versions) == len(set(versions))


def test_backfill_refuses_the_future_and_huge_ranges(db_now):
    now = db_now()
    api.create_interval("b", every=1, unit="SECONDS", start=now - timedelta(days=3), **COMMON)
    with pytest.raises(ValidationError, match="past only"):
        api.backfill("b", now - timedelta(hours=1), now + timedelta(hours=1))
    with pytest.raises(ValidationError, match="in parts"):
        api.backfill("b", now - timedelta(days=2), now - timedelta(days=1))


def test_preview_is_what_fires():
    schedule = api.create_interval("v", every=1, misfire_policy=MisfirePolicy.CATCH_UP, **COMMON)
    expected = api.preview("v", 3)
    assert expected == [schedule.next_run_ts + timedelta(minutes=k) for k in range(3)]
    sql(
        "UPDATE schedule_t SET start_ts = start_ts - interval '2 minutes 1 second',"
        " next_slot_ts = next_slot_ts - interval '2 minutes 1 second',"
        " next_run_ts = next_run_ts - interval '2 minutes 1 second'"
    )
    fire_all()
    fired = list(
        Event.objects.filter(scheduled_ts__isnull=False)
        .order_by("scheduled_ts")
        .values_list("scheduled_ts", flat=True)
    )
    assert [f - fired[0] for f in fired] == [e - expected[0] for e in expected]


def test_dry_run_lists_what_would_fire_and_writes_nothing(db_now):
    now = db_now()
    api.create_interval("a", every=20, **COMMON)
    api.create_cron("b", cron="*/30 * * * *", **COMMON)
    fires = api.dry_run(now, now + timedelta(hours=1))
    names = [name for name, _ in fires]
    assert names.count("a") in (3, 4)
    assert names.count("b") == 2
    assert [when for _, when in fires] == sorted(when for _, when in fires)
    assert not OutboxMessage.objects.exists()


def test_status_reports_the_last_delivery():
    api.create_interval("s", every=1, **COMMON)
    fire_all()
    status = api.status("s")
    assert status.fire_count == 1
    assert status.last_delivery == "PENDING"
    assert status.next_fire is not None


def test_hosts_are_separate():
    other = uuid.uuid4()
    api.create_interval("shared-name", every=1, **COMMON)
    api.create_interval("shared-name", every=2, host_id=other, **COMMON)
    assert api.get("shared-name", host_id=other).frequency_time == 2
    assert [s.frequency_time for s in api.schedules()] == [1]
    assert [s.frequency_time for s in api.schedules(host_id=other)] == [2]
    with pytest.raises(Schedule.DoesNotExist):
        api.get("shared-name", host_id=uuid.uuid4())


def test_backfill_reaches_back_as_far_as_the_history_is_complete(settings, db_now):
    """Not the retention setting: what the purges left (tests/history/test_horizon.py)."""
    from django_dsched.outbox.retention import purge_expired

    settings.DSCHED_RETENTION_DAYS = 2
    now = db_now()
    api.create_interval("b", every=1, unit="HOURS", start=now - timedelta(days=5), **COMMON)
    fired, _ = api.backfill("b", now - timedelta(days=4), now - timedelta(days=3))
    assert fired == 25  # nothing was purged: the history still holds every fire
    purge_expired()  # the leader's pass keeps two days
    with pytest.raises(ValidationError, match="purged"):
        api.backfill("b", now - timedelta(days=3), now - timedelta(days=1))


def test_run_now_with_a_stale_copy_of_a_cancelled_schedule_fires_nothing():
    stale = api.create_interval("raced", every=1, unit="HOURS", **COMMON)
    api.cancel("raced")  # someone else cancels after the caller read the schedule
    assert stale.state == ScheduleState.ACTIVE
    with pytest.raises(ValidationError, match="meanwhile"):
        on_demand.trigger(stale, actor="late")
    assert not OutboxMessage.objects.exists()
    assert not Event.objects.filter(scheduled_ts__isnull=False).exists()


# -- a user as actor: the user's permissions (django_dsched.changes.permissions) --------


def _user_with(name, *codenames):
    from django.contrib.auth.models import Permission, User

    made = User.objects.create_user(name, password="pw")
    made.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=codenames)
    )
    return User.objects.get(pk=made.pk)


def _behind(db_now, name="behind", **extra):
    return api.create_interval(
        name,
        every=1,
        unit="MINUTES",
        start=db_now() - timedelta(minutes=10),
        misfire_policy="CATCH_UP",
        catch_up_limit=10_000,
        topic="t",
        event_type="x",
        **extra,
    )


def test_a_user_actor_needs_the_permission_to_fire_a_backlog(db_now):
    """Resuming with catch_up, and creating a schedule that catches up at once, fire like
    run now: a user without that permission is refused, and nothing is written."""
    pauser = _user_with("pauser", "pause_schedule", "add_schedule")
    schedule = _behind(db_now)
    api.pause(schedule)
    events = Event.objects.count()
    with pytest.raises(NotPermitted, match=r"dsched\.trigger_schedule"):
        api.resume(schedule, catch_up=True, actor=pauser)
    with pytest.raises(NotPermitted, match="backlog"):
        _behind(db_now, "more", actor=pauser)
    with pytest.raises(NotPermitted, match="Item 1"):
        api.bulk_create(
            [
                api.Interval(name="fine", every=1, topic="t", event_type="x"),
                api.Interval(
                    name="more",
                    every=1,
                    start=db_now() - timedelta(minutes=10),
                    misfire_policy="CATCH_UP",
                    topic="t",
                    event_type="x",
                ),
            ],
            actor=pauser,
        )
    for fire in (api.trigger, lambda s, actor: api.backfill(s, db_now(), db_now(), actor=actor)):
        with pytest.raises(NotPermitted):
            fire(schedule, actor=pauser)
    assert Event.objects.count() == events
    assert api.get(schedule.pk).state == "PAUSED"
    assert not Schedule.objects.filter(schedule_name__in=["more", "fine"]).exists()
    # What it may do: resume from now; create a schedule that fires at most its first slot.
    assert api.resume(schedule, actor=pauser)
    api.create_interval("now", every=1, topic="t", event_type="x", actor=pauser)
    api.create_interval(
        "late",
        every=1,
        unit="MINUTES",
        start=db_now() - timedelta(minutes=10),
        topic="t",
        event_type="x",
        actor=pauser,
    )  # COALESCE: one fire, the latest slot


def test_a_user_actor_who_may_fire_and_code_are_not_refused(db_now):
    operator = _user_with("operator", "pause_schedule", "add_schedule", "trigger_schedule")
    schedule = _behind(db_now, actor=operator)
    api.pause(schedule, actor=operator)
    assert api.resume(schedule, catch_up=True, actor=operator)
    _behind(db_now, "by-code", actor="nightly-job")  # code (a name) is trusted
    _behind(db_now, "no-actor")


def test_a_user_actor_needs_the_permission_of_each_call():
    nobody = _user_with("nobody")
    with pytest.raises(NotPermitted, match=r"dsched\.add_schedule"):
        api.create_interval("x", every=1, topic="t", event_type="x", actor=nobody)
    schedule = api.create_interval("y", every=1, topic="t", event_type="x")
    for call, permission in (
        (lambda: api.pause(schedule, actor=nobody), "pause_schedule"),
        (lambda: api.resume(schedule, actor=nobody), "pause_schedule"),
        (lambda: api.cancel(schedule, actor=nobody), "cancel_schedule"),
        (lambda: api.bulk_cancel([schedule], actor=nobody), "cancel_schedule"),
        (lambda: api.bulk_create([], actor=nobody), "add_schedule"),
    ):
        with pytest.raises(NotPermitted, match=permission):
            call()
    assert api.get(schedule.pk).state == "ACTIVE"


def test_save_schedule_asks_a_user_actors_permissions(db_now):
    """save_schedule is a service too: given a user as actor, an edit that fires the
    schedule at once or ends it, and a create that fires a backlog, need the permissions
    they need at every other door (nothing is written otherwise)."""
    from django_dsched.exceptions import EditNotPermitted

    editor = _user_with("editor", "add_schedule", "change_schedule")
    schedule = api.create_once("later", at=db_now() + timedelta(days=1), **COMMON)
    version = schedule.aggregate_version
    schedule.start_ts = db_now() - timedelta(minutes=1)  # due now: a run now in effect
    with pytest.raises(EditNotPermitted, match="run schedules now"):
        edits.save_schedule(schedule, ["start_ts"], actor=editor)
    assert api.get(schedule.pk).aggregate_version == version
    hourly = api.create_interval("hourly", every=1, unit="HOURS", **COMMON)
    Schedule.objects.filter(pk=hourly.pk).update(fire_count=7)
    hourly = api.get(hourly.pk)
    hourly.max_fires = 7  # no fire left: a cancel in effect
    with pytest.raises(EditNotPermitted, match="cancel"):
        edits.save_schedule(hourly, ["max_fires"], actor=editor)
    assert api.get(hourly.pk).state == ScheduleState.ACTIVE
    behind = Schedule(
        host_id=schedule.host_id,
        schedule_name="behind-saved",
        schedule_kind="INTERVAL",
        frequency_unit="MINUTES",
        frequency_time=1,
        start_ts=db_now() - timedelta(minutes=10),
        misfire_policy="CATCH_UP",
        catch_up_limit=10_000,
        event_topic="t",
        event_type="x",
    )
    with pytest.raises(NotPermitted, match="backlog"):
        edits.save_schedule(behind, actor=editor)
    assert not Schedule.objects.filter(schedule_name="behind-saved").exists()
    # Code is trusted, as before; and a caller may still say what the user may do.
    schedule = api.get(schedule.pk)
    schedule.start_ts = db_now() - timedelta(minutes=1)
    edits.save_schedule(schedule, ["start_ts"], actor="a-job")
