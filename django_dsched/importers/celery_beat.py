"""Import django-celery-beat's periodic tasks as schedules delivered by the Celery transport.

``manage.py dsched import-celery-beat [--dry-run] [--disable-source] [--topic celery]`` reads
``django_celery_beat``'s tables and, for each ``PeriodicTask``, creates or updates one schedule
of origin ``CELERY_BEAT`` with the same name, through the same code path as schedules declared
in code (:func:`django_dsched.declared.upsert`, which validates like the Python API and updates
a changed schedule without losing its place on the grid). The mapping is in
docs/migrating-from-celery-beat.md; in short:

* ``IntervalSchedule(every, period)`` → interval (microseconds cannot be imported);
* ``CrontabSchedule`` → cron in its time zone, field by field (checked against Celery's own
  reading of each field; a day-of-month *and* day-of-week restriction cannot be imported:
  Celery wants both to match, cron either);
* ``ClockedSchedule`` → one-shot; ``SolarSchedule`` → not imported (no cron equivalent);
* ``one_off`` → fire limit 1, ``start_time`` → start, ``expires`` → end (a microsecond before:
  beat sends nothing at ``expires``; and the message's expiry),
  ``enabled = False`` → paused, ``priority`` → priority (direction depends on the broker);
* the task name, args, kwargs, queue, exchange, routing key, priority, headers and expiry go in
  the event data the Celery transport reads (``task``, ``args``, ``kwargs``, ``options``); the
  description and the source's name in ``data["celery_beat"]``.

The Celery transport takes a task name and options from the data only where its route opts
in (``TASK_FROM_DATA``, ``ALLOWED_TASKS``, ``OPTIONS_FROM_DATA``): the report's notes give the
route the imported schedules need, with the tasks they send and the options they set, and say
what the configured route lacks.

Everything happens in one transaction (``--dry-run`` rolls it back); each task is imported
whole or reported as not imported with the reason. Running it again changes nothing unless a
source row changed. ``--disable-source`` disables, in the same transaction, the imported
``PeriodicTask`` rows, so beat and dsched never both fire them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from croniter import croniter
from django.apps import apps
from django.core import exceptions as django_exceptions
from django.db import router, transaction
from django.db.models import Model

from django_dsched import declared
from django_dsched.changes import pauses
from django_dsched.conf import app_settings
from django_dsched.enums import FrequencyUnit, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ConfigurationError, NotImportable, ValidationError
from django_dsched.models import Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.models.validators import NAME_MAX_LENGTH, identifier_validator
from django_dsched.outbox.transports import Transports
from django_dsched.outbox.transports.celery import CeleryTransport, broker_kind, broker_url
from django_dsched.outbox.transports.registry import backend_class
from django_dsched.runtime.clock import database_now

ORIGIN = ScheduleOrigin.CELERY_BEAT
ACTOR = "import-celery-beat"
DEFAULT_TOPIC = "celery"
# The event type of tasks whose name cannot be one (it is used only for display and routing).
FALLBACK_EVENT_TYPE = "celery.task"
# Pause reason of schedules whose PeriodicTask is disabled in beat.
DISABLED = "disabled in django-celery-beat"
# Tasks beat adds by itself, which are not the application's schedules.
SKIPPED = {
    "celery.backend_cleanup": (
        "beat adds it by itself to clean expired results; schedule celery.backend_cleanup "
        "yourself if your result backend needs it"
    ),
}
UNITS = {
    "days": FrequencyUnit.DAYS,
    "hours": FrequencyUnit.HOURS,
    "minutes": FrequencyUnit.MINUTES,
    "seconds": FrequencyUnit.SECONDS,
}
# minute, hour, day of month, month, day of week: Celery's attribute and the full range.
CRON_FIELDS = (
    ("minute", range(60)),
    ("hour", range(24)),
    ("day_of_month", range(1, 32)),
    ("month_of_year", range(1, 13)),
    ("day_of_week", range(7)),
)
# The instant before a time: an exclusive bound written as an inclusive one.
MICROSECOND = timedelta(microseconds=1)
STOP_BEAT = (
    "Stop celery beat now (the `celery beat` process, or the -B flag of a worker, in your "
    "Procfile, supervisor, systemd unit or compose file) and run `manage.py run_scheduler` and "
    "`manage.py run_relay` instead; workers keep running as they are."
)


@dataclass
class ImportReport:
    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    # (PeriodicTask name, reason)
    not_imported: list[tuple[str, str]] = field(default_factory=list)
    disabled_in_beat: list[str] = field(default_factory=list)
    # Imported schedules whose PeriodicTask is gone (left alone).
    orphaned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The Celery tasks the imported schedules send, and the keys of data["options"] they set:
    # what their route must allow (ALLOWED_TASKS, OPTIONS_FROM_DATA).
    tasks: list[str] = field(default_factory=list)
    option_keys: list[str] = field(default_factory=list)

    @property
    def imported(self) -> list[str]:
        return [*self.created, *self.updated, *self.unchanged]


def source_models() -> dict[str, type[Model]]:
    """django-celery-beat's models; ConfigurationError when the app is not installed."""
    if not apps.is_installed("django_celery_beat"):
        raise ConfigurationError(
            "django_celery_beat is not in INSTALLED_APPS: the importer reads its tables."
        )
    return {
        name: apps.get_model("django_celery_beat", name)
        for name in ("PeriodicTask", "PeriodicTasks")
    }


# -- the mapping ------------------------------------------------------------------------------
def schedule_name(task_name: str) -> str:
    """The schedule's name: the task's, whitespace collapsed, shortened with a hash if long."""
    name = " ".join(task_name.split())
    if not name:
        raise NotImportable("its name is blank")
    if len(name) > NAME_MAX_LENGTH:
        digest = hashlib.sha256(task_name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_MAX_LENGTH - 9]}~{digest}"
    return name


def event_type_for(task: str) -> str:
    try:
        identifier_validator(task)
    except django_exceptions.ValidationError:
        return FALLBACK_EVENT_TYPE
    return task if len(task) <= NAME_MAX_LENGTH else FALLBACK_EVENT_TYPE


def _json(text: str | None, default: Any, what: str, kind: type) -> Any:
    if not text:
        return default
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise NotImportable(f"its {what} are not valid JSON ({exc})") from None
    if value is None:
        return default
    if not isinstance(value, kind):
        raise NotImportable(f"its {what} must be a JSON {'list' if kind is list else 'object'}")
    return value


def _compact(values: Iterable[int]) -> str:
    """``{1, 2, 3, 5}`` → ``"1-3,5"``."""
    parts: list[str] = []
    ordered = sorted(values)
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(parts)


def cron_expression(crontab: Any) -> str:
    """A five-field cron expression that fires when Celery's crontab does.

    Each field is read by Celery's own parser; the source text is kept when croniter reads it
    the same way, else the field is written out as numbers.
    """
    from celery.schedules import crontab as celery_crontab

    texts = {name: "".join(str(getattr(crontab, name) or "*").split()) for name, _ in CRON_FIELDS}
    try:
        parsed = celery_crontab(**texts)
    except Exception as exc:  # Celery raises ValueError and friends for what it cannot read
        raise NotImportable(f"Celery cannot read its crontab ({exc})") from None
    fields = []
    restricted = set()
    for index, (name, full) in enumerate(CRON_FIELDS):
        values = set(getattr(parsed, name))
        if values >= set(full):
            fields.append("*")
            continue
        restricted.add(name)
        probe = ["*"] * 5
        probe[index] = texts[name]
        try:
            expanded = croniter.expand(" ".join(probe))[0][index]
        except Exception:  # croniter cannot read this text: write the values out
            expanded = None
        fields.append(texts[name] if expanded is not None and set(expanded) == values else "")
        if not fields[-1]:
            fields[-1] = _compact(values)
    if {"day_of_month", "day_of_week"} <= restricted:
        raise NotImportable(
            "it restricts both the day of the month and the day of the week: Celery runs on "
            "days matching both, cron on days matching either"
        )
    return " ".join(fields)


def route_of(topic: str, host: Any) -> Mapping[str, Any] | None:
    """The route entry that delivers ``topic`` for ``host``; None if none does."""
    try:
        transports = Transports()
        return transports.entry(transports.route_for(topic, host))
    except Exception:
        return None


def priority_sign(topic: str, host: Any = None) -> int:
    """+1 when a higher Celery priority is more urgent (RabbitMQ), -1 when lower is (Redis).

    Read from the Celery transport configured for ``topic`` (and ``host``); RabbitMQ's when
    unknown.
    """
    entry = route_of(topic, host)
    try:
        url = broker_url(entry.get("OPTIONS", {})) if entry is not None else ""
    except Exception:
        return 1
    return -1 if broker_kind(url) == "redis" else 1


def spec_for(
    task: Any,
    *,
    topic: str,
    sign: int,
    existing: Schedule | None,
    now: datetime,
    disabled_by_import: bool,
) -> dict[str, Any]:
    """The declaration (``declared`` keys) of one PeriodicTask; NotImportable if it has none."""
    kinds = [k for k in ("interval", "crontab", "clocked", "solar") if getattr(task, f"{k}_id")]
    if not kinds:
        raise NotImportable("it has no schedule")
    if len(kinds) > 1:
        raise NotImportable(f"it has more than one schedule ({', '.join(kinds)})")
    if not task.task.strip():
        raise NotImportable("it names no Celery task")
    if task.expires is not None and task.expires <= now:
        raise NotImportable(f"it expired at {task.expires.isoformat()} (beat no longer runs it)")
    spec: dict[str, Any] = {}
    kind = kinds[0]
    if kind == "solar":
        raise NotImportable(
            f"solar schedules ({task.solar.event}) have no cron equivalent; keep beat for it "
            "or replace it with a cron schedule"
        )
    if kind == "interval":
        interval = task.interval
        unit = UNITS.get(interval.period)
        if unit is None:
            raise NotImportable(f"intervals in {interval.period} are not supported")
        spec.update(every=interval.every, unit=unit)
    elif kind == "crontab":
        spec.update(cron=cron_expression(task.crontab), time_zone=str(task.crontab.timezone))
    else:
        spec["at"] = task.clocked.clocked_time
    recorded = _source(existing).get("start_time")
    start_time = task.start_time.isoformat() if task.start_time is not None else None
    if existing is None and kind == "interval":
        # Go on where beat is: its next run is one interval after its last (or after the
        # row's last change, if it never ran), and never before start_time.
        last = task.last_run_at or task.date_changed
        every = timedelta(**{task.interval.period: task.interval.every})
        candidates = [t for t in (task.start_time, last + every if last else None) if t]
        if candidates:
            spec["start"] = max(candidates)
    elif (
        kind != "clocked"
        and task.start_time is not None
        and (existing is None or start_time != recorded)
    ):
        spec["start"] = task.start_time
    args = _json(task.args, [], "args", list)
    kwargs = _json(task.kwargs, {}, "kwargs", dict)
    headers = _json(task.headers, {}, "headers", dict)
    spec.update(
        topic=topic,
        event_type=event_type_for(task.task),
        data={
            "task": task.task,
            "args": args,
            "kwargs": kwargs,
            "options": _options(task, headers),
            "celery_beat": _beat_source(task, start_time, disabled_by_import),
        },
        # Beat stops at expires (a slot at that instant is not sent); end is inclusive.
        end=None if task.expires is None else task.expires - MICROSECOND,
        max_fires=1 if task.one_off and kind != "clocked" else None,
        priority=0 if task.priority is None else sign * task.priority,
    )
    return spec


def _options(task: Any, headers: dict[str, Any]) -> dict[str, Any]:
    """The Celery options beat sends the task with (queue, priority, headers, expires)."""
    options: dict[str, Any] = {}
    for key in ("queue", "exchange", "routing_key"):
        if getattr(task, key):
            options[key] = getattr(task, key)
    if task.priority is not None:
        options["priority"] = task.priority
    options["headers"] = {**headers, "periodic_task_name": task.name}  # as beat sends it
    if task.expires is not None:
        options["expires"] = task.expires.isoformat()
    elif task.expire_seconds:
        options["expires"] = task.expire_seconds
    return options


def _beat_source(task: Any, start_time: str | None, disabled_by_import: bool) -> dict[str, Any]:
    """Where the schedule came from, kept in its data (``celery_beat``)."""
    source: dict[str, Any] = {"periodic_task": task.name}
    if start_time is not None:
        source["start_time"] = start_time
    if task.description:
        source["description"] = task.description
    if disabled_by_import:
        source["disabled_by_import"] = True
    return source


# -- the import -------------------------------------------------------------------------------
def import_celery_beat(
    *,
    dry_run: bool = False,
    disable_source: bool = False,
    topic: str = DEFAULT_TOPIC,
    host_id: Any = None,
    actor: str = ACTOR,
) -> ImportReport:
    """Import every PeriodicTask (see the module doc); returns what was done and why not."""
    try:
        identifier_validator(topic)
    except django_exceptions.ValidationError:
        raise ValidationError(f"{topic!r} is not a valid topic") from None
    importer = Importer(
        host=resolve_host(host_id), topic=topic, disable_source=disable_source, actor=actor
    )
    importer.report.dry_run = dry_run
    importer.run()
    report = importer.report
    report.notes = [
        *route_notes(report, topic, importer.host),
        *_notes(report, disable_source),
    ]
    return report


def _source(schedule: Schedule | None) -> dict[str, Any]:
    """What the importer recorded about an imported schedule's PeriodicTask."""
    source = schedule.event_data.get("celery_beat") if schedule is not None else None
    return source if isinstance(source, dict) else {}


def _owner(schedule: Schedule | None) -> str | None:
    """The PeriodicTask an imported schedule came from."""
    owner = _source(schedule).get("periodic_task")
    return owner if isinstance(owner, str) else None


class Importer:
    """One run of the import, in one transaction (on both databases if they differ)."""

    def __init__(self, *, host: Any, topic: str, disable_source: bool, actor: str) -> None:
        models = source_models()
        self.periodic_task: Any = models["PeriodicTask"]
        self.periodic_tasks: Any = models["PeriodicTasks"]
        self.source_db = router.db_for_write(self.periodic_task)
        self.host = host
        self.topic = topic
        self.disable_source = disable_source
        self.actor = actor
        self.sign = priority_sign(topic, host)
        self.report = ImportReport()
        # Imported schedules of the host by name, and the PeriodicTask each name went to.
        self.mine: dict[str, Schedule] = {}
        self.claimed: dict[str, str] = {}

    def run(self) -> None:
        with (
            transaction.atomic(using=app_settings.DATABASE),
            transaction.atomic(using=self.source_db),
        ):
            now = database_now()
            tasks = list(
                self.periodic_task.objects.using(self.source_db)
                .select_related("interval", "crontab", "clocked", "solar")
                .order_by("name")
            )
            self.mine = {
                s.schedule_name: s
                for s in Schedule.objects.filter(host_id=self.host, origin=ORIGIN)
                .select_for_update()
                .order_by("pk")
            }
            to_disable = []
            for task in tasks:
                try:
                    enabled = self.import_one(task, now)
                except NotImportable as exc:
                    self.report.not_imported.append((task.name, str(exc)))
                    continue
                if enabled and task.enabled and self.disable_source:
                    to_disable.append(task)
            if to_disable:
                self.periodic_task.objects.using(self.source_db).filter(
                    pk__in=[t.pk for t in to_disable]
                ).update(enabled=False)
                self.periodic_tasks.update_changed()  # running beats reload on this
                self.report.disabled_in_beat = [t.name for t in to_disable]
            present = {t.name for t in tasks}
            self.report.orphaned = sorted(
                name
                for name, schedule in self.mine.items()
                if _owner(schedule) not in present and name not in self.claimed
            )
            if self.report.dry_run:
                transaction.set_rollback(True, using=self.source_db)
                transaction.set_rollback(True, using=app_settings.DATABASE)

    def import_one(self, task: Any, now: datetime) -> bool:
        """Create or update one schedule, all or nothing; return whether it is to fire."""
        if task.name in SKIPPED:
            raise NotImportable(SKIPPED[task.name])
        name = schedule_name(task.name)
        owner = self.claimed.get(name) or _owner(self.mine.get(name))
        if owner is not None and owner != task.name:
            raise NotImportable(f"its schedule name {name!r} is taken by PeriodicTask {owner!r}")
        existing = self.mine.get(name)
        if task.enabled:
            enabled, marker = True, self.disable_source
        else:  # disabled in beat: by a person, or by an earlier --disable-source
            enabled = marker = bool(_source(existing).get("disabled_by_import"))
        spec = spec_for(
            task,
            topic=self.topic,
            sign=self.sign,
            existing=existing,
            now=now,
            disabled_by_import=marker,
        )
        try:
            with transaction.atomic(using=app_settings.DATABASE):
                outcome, schedule = declared.upsert(
                    name, self.host, declared.fields_of(spec), origin=ORIGIN, actor=self.actor
                )
                if schedule is None:
                    other = Schedule.objects.get(host_id=self.host, schedule_name=name)
                    raise NotImportable(
                        f"a schedule named {name!r} already exists (origin {other.origin}); "
                        "it was left alone"
                    )
                self.apply_enabled(schedule, enabled)
        except django_exceptions.ValidationError as exc:
            raise NotImportable("; ".join(exc.messages)) from None
        self.claimed[name] = task.name  # only a task that was imported holds its name
        getattr(self.report, outcome).append(name)
        report = self.report
        report.tasks = sorted({*report.tasks, task.task})
        report.option_keys = sorted({*report.option_keys, *spec["data"]["options"]})
        return enabled

    def apply_enabled(self, schedule: Schedule, enabled: bool) -> None:
        """Pause a schedule whose task is disabled in beat; resume it when it is enabled again."""
        selected = Schedule.objects.filter(pk=schedule.pk)
        name = schedule.schedule_name
        if not enabled and schedule.state == ScheduleState.ACTIVE:
            pauses.pause(selected, actor=self.actor, reason=DISABLED)
            self.report.paused.append(name)
        elif (
            enabled
            and schedule.state == ScheduleState.PAUSED
            and schedule.paused_reason == DISABLED
        ):
            pauses.resume(selected, actor=self.actor)
            self.report.resumed.append(name)


def route_notes(report: ImportReport, topic: str, host: Any) -> list[str]:
    """What the route of ``topic`` (for ``host``) lacks to send the imported tasks: the whole
    route when the topic is not delivered by the Celery transport, else the options missing."""
    entry = route_of(topic, host)
    try:
        routed = entry is not None and issubclass(backend_class(entry["BACKEND"]), CeleryTransport)
    except Exception:
        routed = False
    if not routed:
        options = {
            "BROKER_URL": "...",
            "TASK_FROM_DATA": True,
            "ALLOWED_TASKS": report.tasks or ["..."],
            "OPTIONS_FROM_DATA": report.option_keys,
        }
        return [
            f"Topic {topic!r} is not delivered by the Celery transport yet: add "
            f'{{"{topic}": {{"BACKEND": "celery", "OPTIONS": {options!r}}}}} to '
            "DSCHED_TRANSPORTS (BROKER_URL: your broker's; ALLOWED_TASKS: the tasks imported; "
            "OPTIONS_FROM_DATA: the options they set)."
        ]
    assert entry is not None
    options = entry.get("OPTIONS", {})
    lacks = []
    if report.tasks and not options.get("TASK_FROM_DATA"):
        lacks.append('"TASK_FROM_DATA": True (the imported schedules name their task)')
    allowed = options.get("ALLOWED_TASKS")
    refused = [
        t for t in report.tasks if allowed is None or not any(fnmatchcase(t, p) for p in allowed)
    ]
    if refused:
        lacks.append(f"these tasks in ALLOWED_TASKS: {refused!r}")
    taken = options.get("OPTIONS_FROM_DATA") or ()
    missing = [key for key in report.option_keys if key not in taken]
    if missing:
        lacks.append(f"these keys in OPTIONS_FROM_DATA: {missing!r}")
    if not lacks:
        return []
    return [
        f"The route of topic {topic!r} would dead-letter the imported tasks until its OPTIONS "
        f"have {'; '.join(lacks)}."
    ]


def _notes(report: ImportReport, disable_source: bool) -> list[str]:
    notes = []
    if report.orphaned:
        notes.append(
            f"{len(report.orphaned)} imported schedule(s) no longer have a PeriodicTask; they "
            "were left as they are (cancel them if they should stop)."
        )
    if disable_source:
        if report.not_imported:
            notes.append(
                f"{len(report.not_imported)} PeriodicTask(s) were not imported and stay as they "
                "are in beat: keep beat running for them, or replace them, before stopping it."
            )
        notes.append(STOP_BEAT)
    elif report.imported:
        notes.append(
            "Beat still runs these tasks: stop beat, then run this again with "
            "--disable-source (it disables the imported PeriodicTasks in the same transaction)."
        )
    return notes
