"""The django-celery-beat importer, on the real package's own models and tables."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    PeriodicTasks,
    SolarSchedule,
)
from django_celery_beat.schedulers import ModelEntry

from django_dsched import api
from django_dsched.enums import ScheduleKind, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import PermanentDeliveryError
from django_dsched.importers.celery_beat import (
    DISABLED,
    cron_expression,
    import_celery_beat,
    schedule_name,
)
from django_dsched.models import Event, OutboxMessage, Schedule, envelope
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports.celery import task_message
from tests.outbox_helpers import celery_route, celery_tasks_waiting

pytestmark = pytest.mark.django_db(transaction=True)


def crontab(zone: str = "UTC", **fields: str) -> CrontabSchedule:
    return CrontabSchedule.objects.create(timezone=ZoneInfo(zone), **fields)


def interval(every: int, period: str) -> IntervalSchedule:
    return IntervalSchedule.objects.create(every=every, period=period)


@pytest.fixture
def beat(db_now):
    """A django-celery-beat table with one task of each kind the importer meets."""
    now = db_now()
    tasks = {
        "poll every 10 minutes": PeriodicTask(
            interval=interval(10, "minutes"),
            task="app.tasks.poll",
            args='["a", 1]',
            kwargs='{"x": {"y": 2}}',
            queue="polls",
            exchange="ex",
            routing_key="rk",
            priority=7,
            headers='{"team": "ops"}',
            expire_seconds=30,
            description="Polls the partner.",
        ),
        "weekday report": PeriodicTask(
            crontab=crontab("Europe/Brussels", minute="30", hour="2", day_of_week="mon-fri"),
            task="app.tasks.report",
        ),
        "business hours": PeriodicTask(
            crontab=crontab("America/New_York", minute="*/15", hour="9-17", month_of_year="1,7"),
            task="app.tasks.check",
        ),
        "monthly": PeriodicTask(
            crontab=crontab("Asia/Kolkata", minute="0", hour="0", day_of_month="1"),
            task="app.tasks.invoice",
            expires=now + timedelta(days=400),
            start_time=now + timedelta(days=1),
        ),
        "at launch": PeriodicTask(
            clocked=ClockedSchedule.objects.create(clocked_time=now + timedelta(days=3)),
            one_off=True,
            task="app.tasks.launch",
        ),
        "once soon": PeriodicTask(
            interval=interval(1, "hours"), one_off=True, task="app.tasks.once"
        ),
        "paused one": PeriodicTask(
            interval=interval(2, "days"), enabled=False, task="app.tasks.sleepy"
        ),
        "at sunrise": PeriodicTask(
            solar=SolarSchedule.objects.create(event="sunrise", latitude=50.85, longitude=4.35),
            task="app.tasks.wake",
        ),
        "too fast": PeriodicTask(interval=interval(500, "microseconds"), task="app.tasks.fast"),
        "long gone": PeriodicTask(
            interval=interval(1, "days"),
            task="app.tasks.old",
            expires=now - timedelta(days=1),
        ),
        "mondays the first": PeriodicTask(
            crontab=crontab(day_of_month="1", day_of_week="1"), task="app.tasks.rare"
        ),
        "broken args": PeriodicTask(
            interval=interval(1, "days"), task="app.tasks.broken", args="[1, 2"
        ),
        "no task": PeriodicTask(interval=interval(1, "days"), task=" "),
        "celery.backend_cleanup": PeriodicTask(
            crontab=crontab(minute="0", hour="4"), task="celery.backend_cleanup"
        ),
    }
    for name, task in tasks.items():
        task.name = name
        task.save()
    return tasks


IMPORTED = [
    "at launch",
    "business hours",
    "monthly",
    "once soon",
    "paused one",
    "poll every 10 minutes",
    "weekday report",
]


def test_each_kind_is_imported_or_reported_with_its_reason(beat):
    report = import_celery_beat()

    assert sorted(report.created) == IMPORTED
    reasons = dict(report.not_imported)
    assert set(reasons) == {
        "at sunrise",
        "too fast",
        "long gone",
        "mondays the first",
        "broken args",
        "no task",
        "celery.backend_cleanup",
    }
    assert "solar schedules (sunrise) have no cron equivalent" in reasons["at sunrise"]
    assert "microseconds are not supported" in reasons["too fast"]
    assert "expired at" in reasons["long gone"]
    assert "both the day of the month and the day of the week" in reasons["mondays the first"]
    assert "args are not valid JSON" in reasons["broken args"]
    assert "names no Celery task" in reasons["no task"]
    assert "beat adds it by itself" in reasons["celery.backend_cleanup"]
    assert report.paused == ["paused one"]
    schedules = {s.schedule_name: s for s in Schedule.objects.all()}
    assert sorted(schedules) == IMPORTED
    assert {s.origin for s in schedules.values()} == {ScheduleOrigin.CELERY_BEAT}
    assert {s.event_topic for s in schedules.values()} == {"celery"}

    poll = schedules["poll every 10 minutes"]
    assert (poll.schedule_kind, poll.frequency_time, poll.frequency_unit) == (
        ScheduleKind.INTERVAL,
        10,
        "MINUTES",
    )
    assert poll.event_type == "app.tasks.poll" and poll.priority == 7  # RabbitMQ: higher first
    assert poll.event_data == {
        "task": "app.tasks.poll",
        "args": ["a", 1],
        "kwargs": {"x": {"y": 2}},
        "options": {
            "queue": "polls",
            "exchange": "ex",
            "routing_key": "rk",
            "priority": 7,
            "headers": {"team": "ops", "periodic_task_name": "poll every 10 minutes"},
            "expires": 30,
        },
        "celery_beat": {
            "periodic_task": "poll every 10 minutes",
            "description": "Polls the partner.",
        },
    }
    weekday = schedules["weekday report"]
    assert (weekday.cron_expression, weekday.time_zone) == ("30 2 * * mon-fri", "Europe/Brussels")
    business = schedules["business hours"]
    assert (business.cron_expression, business.time_zone) == (
        "*/15 9-17 * 1,7 *",
        "America/New_York",
    )
    monthly = schedules["monthly"]
    assert (monthly.cron_expression, monthly.time_zone) == ("0 0 1 * *", "Asia/Kolkata")
    task = beat["monthly"]
    # Beat sends nothing at expires (its bound is exclusive); end_ts is inclusive.
    assert (monthly.start_ts, monthly.end_ts) == (
        task.start_time,
        task.expires - timedelta(microseconds=1),
    )
    assert monthly.event_data["options"]["expires"] == task.expires.isoformat()
    launch = schedules["at launch"]
    assert launch.schedule_kind == ScheduleKind.ONCE
    assert launch.next_run_ts == beat["at launch"].clocked.clocked_time
    assert schedules["once soon"].max_fires == 1 and poll.max_fires is None
    paused = schedules["paused one"]
    assert (paused.state, paused.paused_reason) == (ScheduleState.PAUSED, DISABLED)
    assert any("not delivered by the Celery transport" in note for note in report.notes)


def test_an_imported_event_makes_the_task_beat_would_send(beat):
    report = import_celery_beat()
    # The route the report asks for: the imported tasks, and the options they set.
    route = {
        "TASK_FROM_DATA": True,
        "ALLOWED_TASKS": report.tasks,
        "OPTIONS_FROM_DATA": report.option_keys,
    }
    for name in ("poll every 10 minutes", "weekday report", "monthly"):
        schedule = Schedule.objects.get(schedule_name=name)
        api.trigger(schedule)
        event = Event.objects.get(aggregate_id=schedule.schedule_id, scheduled_ts__isnull=False)
        delivered = envelope.of_event(event.id)
        message = Message(event.id, delivered["topic"], event.event_type, delivered, 1)
        with pytest.raises(PermanentDeliveryError, match="TASK_FROM_DATA"):
            task_message(message, {})  # a route that does not opt in refuses the data's task
        task, args, kwargs, options = task_message(message, route)
        entry = ModelEntry(PeriodicTask.objects.get(name=name))
        assert entry.task in report.tasks
        assert (task, args, kwargs) == (entry.task, entry.args, entry.kwargs)
        headers = {k: v for k, v in options.pop("headers").items() if not k.startswith("dsched_")}
        assert headers == entry.options.pop("headers")
        if isinstance(entry.options.get("expires"), int):  # expire_seconds: after the fire
            assert options.pop("expires") == event.event_ts + timedelta(seconds=30)
            entry.options.pop("expires")
        assert options == entry.options


def test_running_it_again_changes_nothing(beat):
    import_celery_beat()
    versions = dict(Schedule.objects.values_list("schedule_name", "aggregate_version"))
    events = Event.objects.count()

    again = import_celery_beat()

    assert again.created == again.updated == again.paused == [] and again.resumed == []
    assert sorted(again.unchanged) == IMPORTED
    assert dict(Schedule.objects.values_list("schedule_name", "aggregate_version")) == versions
    assert Event.objects.count() == events


def test_a_changed_source_row_updates_the_schedule_without_losing_its_place(beat):
    import_celery_beat()
    before = Schedule.objects.get(schedule_name="poll every 10 minutes")
    task = beat["poll every 10 minutes"]
    task.kwargs = '{"x": 3}'
    task.description = "Polls both partners."
    task.save()
    PeriodicTask.objects.filter(name="paused one").update(enabled=True)

    report = import_celery_beat()

    assert sorted(report.updated) == ["poll every 10 minutes"]
    assert report.resumed == ["paused one"]
    after = Schedule.objects.get(schedule_name="poll every 10 minutes")
    assert after.event_data["kwargs"] == {"x": 3}
    assert after.event_data["celery_beat"]["description"] == "Polls both partners."
    assert (after.next_run_ts, after.start_ts) == (before.next_run_ts, before.start_ts)
    assert after.aggregate_version == before.aggregate_version + 1
    # A timing change moves the next run onto the new grid, from the same anchor.
    task.interval = interval(30, "minutes")
    task.save()
    assert import_celery_beat().updated == ["poll every 10 minutes"]
    moved = Schedule.objects.get(schedule_name="poll every 10 minutes")
    assert moved.frequency_time == 30 and moved.start_ts == before.start_ts
    assert (moved.next_slot_ts - moved.start_ts) % timedelta(minutes=30) == timedelta(0)


def test_a_dry_run_writes_nothing(beat):
    report = import_celery_beat(dry_run=True, disable_source=True)

    assert sorted(report.created) == IMPORTED and report.dry_run
    assert not Schedule.objects.exists() and not Event.objects.exists()
    assert PeriodicTask.objects.filter(enabled=True).count() == len(beat) - 1


def test_disable_source_turns_off_what_was_imported_in_the_same_transaction(beat):
    before = PeriodicTasks.last_change()

    report = import_celery_beat(disable_source=True)

    enabled = set(PeriodicTask.objects.filter(enabled=True).values_list("name", flat=True))
    assert enabled == set(dict(report.not_imported))  # what beat must still run
    assert sorted(report.disabled_in_beat) == sorted(set(IMPORTED) - {"paused one"})
    assert PeriodicTasks.last_change() > before  # a running beat reloads its schedule
    assert any("Stop celery beat" in note for note in report.notes)
    # The imported schedules still fire; running it again (with or without the flag)
    # changes nothing: the importer knows it disabled those tasks itself.
    states = dict(Schedule.objects.values_list("schedule_name", "state"))
    assert states["weekday report"] == ScheduleState.ACTIVE
    for flag in (False, True):
        again = import_celery_beat(disable_source=flag)
        assert again.updated == again.paused == [] and sorted(again.unchanged) == IMPORTED
    assert dict(Schedule.objects.values_list("schedule_name", "state")) == states


def test_a_bad_row_is_reported_and_nothing_of_it_is_written(beat, settings):
    settings.DSCHED_EVENT_DATA_MAX_BYTES = 2000
    big = PeriodicTask.objects.create(
        name="big",
        interval=interval(1, "days"),
        task="app.tasks.big",
        kwargs=json.dumps({"blob": "x" * 3000}),
    )

    report = import_celery_beat()

    assert "Event data is" in dict(report.not_imported)[big.name]
    assert not Schedule.objects.filter(schedule_name="big").exists()
    assert sorted(report.created) == IMPORTED  # the others are imported
    assert Event.objects.count() == len(IMPORTED) + 1  # created x7, paused x1


def test_names_that_collide_are_reported(beat):
    api.create_interval("weekday report", every=1, topic="mine", event_type="mine")
    long_name = "n" * 150
    PeriodicTask.objects.create(name=long_name, interval=interval(1, "days"), task="app.t")

    report = import_celery_beat()

    assert "already exists (origin API)" in dict(report.not_imported)["weekday report"]
    assert Schedule.objects.get(schedule_name="weekday report").event_topic == "mine"
    short = schedule_name(long_name)
    assert len(short) == 126 and short in report.created


def test_the_report_says_what_the_route_lacks(beat, settings):
    settings.DSCHED_TRANSPORTS = {
        "celery": {"BACKEND": "celery", "OPTIONS": {"ALLOWED_TASKS": ["app.tasks.poll"]}}
    }
    report = import_celery_beat(dry_run=True)
    (note,) = [n for n in report.notes if "would dead-letter the imported tasks" in n]
    assert '"TASK_FROM_DATA": True' in note
    assert "'app.tasks.report'" in note and "'app.tasks.poll'" not in note.split("ALLOWED")[1]
    assert "OPTIONS_FROM_DATA: ['exchange', 'expires', 'headers'" in note


def test_the_documented_migration_delivers_each_imported_task(beat, settings, redis_url):
    """docs/migrating-from-celery-beat.md end to end: import, route as the report says (step
    2's route), fire, relay: every task reaches the broker, none is dead-lettered."""
    queue = f"celery-{uuid.uuid4().hex[:8]}"
    dry = import_celery_beat(dry_run=True)
    settings.DSCHED_TRANSPORTS = {
        "celery": celery_route(redis_url, queue, dry.tasks, dry.option_keys),
        "*": {"BACKEND": "handlers"},
    }
    report = import_celery_beat(disable_source=True)
    assert not [n for n in report.notes if "Celery transport" in n or "dead-letter" in n]
    for name in ("weekday report", "monthly", "business hours"):
        api.trigger(name)

    assert Relay(instance_id="r1").run_until_idle() == 3

    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {"DELIVERED"}
    sent = sorted(headers["task"] for headers in celery_tasks_waiting(redis_url, queue))
    assert sent == ["app.tasks.check", "app.tasks.invoice", "app.tasks.report"]


def test_priority_follows_the_broker(beat, settings):
    settings.DSCHED_TRANSPORTS = {
        "celery": {"BACKEND": "celery", "OPTIONS": {"BROKER_URL": "redis://localhost:6379/0"}}
    }
    report = import_celery_beat()
    # Redis reads a lower Celery priority as more urgent; dsched fires higher first.
    assert Schedule.objects.get(schedule_name="poll every 10 minutes").priority == -7
    assert not any("not delivered by the Celery transport" in n for n in report.notes)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"minute": "*/15"}, "*/15 * * * *"),
        ({"minute": "0", "hour": "9-17/2", "day_of_week": "mon-fri"}, "0 9-17/2 * * mon-fri"),
        ({"minute": "0, 30", "hour": "8,20"}, "0,30 8,20 * * *"),
        ({"minute": "0", "hour": "0", "day_of_week": "sun"}, "0 0 * * sun"),
        ({"minute": "0", "hour": "0", "day_of_week": "0-6"}, "0 0 * * *"),
        ({"minute": "0", "hour": "0", "day_of_week": "monday"}, "0 0 * * 1"),
        ({"minute": "0", "hour": "0", "month_of_year": "2-4,6"}, "0 0 * 2-4,6 *"),
    ],
)
def test_crontab_fields_map_one_to_one(fields, expected):
    assert cron_expression(CrontabSchedule(**fields)) == expected


def test_the_command(beat):
    from io import StringIO

    out = StringIO()
    call_command("dsched", "import-celery-beat", "--dry-run", stdout=out)
    text = out.getvalue()
    assert text.startswith("Dry run: nothing was written")
    assert "created 7, updated 0, unchanged 0, paused 1" in text
    assert "not imported: at sunrise: solar schedules" in text
    assert not Schedule.objects.exists()

    out = StringIO()
    call_command("dsched", "import-celery-beat", "--disable-source", stdout=out)
    assert "disabled in beat: weekday report" in out.getvalue()
    assert "Stop celery beat now" in out.getvalue()
    assert Schedule.objects.count() == len(IMPORTED)


def test_an_expiry_that_falls_on_a_slot_does_not_fire_that_slot(db_now):
    """As beat: a task whose expires is exactly 10:00 is not sent at 10:00."""
    start = (db_now() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    PeriodicTask.objects.create(
        name="hourly until",
        crontab=crontab("UTC", minute="0"),
        task="app.tasks.hourly",
        expires=start + timedelta(hours=2),
    )
    import_celery_beat()
    schedule = Schedule.objects.get(schedule_name="hourly until")
    slots = schedule.upcoming(10)
    assert slots == [start, start + timedelta(hours=1)]
