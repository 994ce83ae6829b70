"""Schedules declared in code, and their sync to the database.

Declare them in settings::

    DSCHED_SCHEDULES = {
        "nightly-report": {"cron": "0 2 * * *", "time_zone": "Europe/Brussels",
                           "topic": "reports", "event_type": "report.build"},
        "month-end-close": {"rrule": "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=17;BYMINUTE=0",
                            "time_zone": "Europe/Brussels", "calendars": ["Belgium"],
                            "calendar_policy": "BACKWARD", "topic": "finance",
                            "event_type": "close.month"},
        "heartbeat": {"every": 30, "unit": "SECONDS", "topic": "ops", "event_type": "ping"},
    }

or next to the code they trigger, in an app's ``dsched_schedules`` module (imported by the
sync) or any module imported at start-up::

    from django_dsched.declared import periodic

    @periodic("nightly-report", cron="0 2 * * *", topic="reports")
    def build_report(event): ...   # also registered as the in-process handler

The function runs only for the messages of the schedule declared for it (its host, its name,
declared in code): another schedule naming its event type, of any host, is dead-lettered
with the reason, and the function is not called.

``manage.py dsched sync`` (and, unless ``DSCHED_SYNC_ON_MIGRATE = False``, every
``migrate``) makes the database match: declared schedules that are new are created;
changed ones are updated without losing their place (the next run moves only when the
timing changed); ones no longer declared are paused with the reason ``removed from code``
(and resumed if declared again). Schedules created in the admin or the API are never
touched, even when a declaration has the same name (a warning says so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.core import exceptions as django_exceptions
from django.core.management.base import CommandError
from django.db import transaction
from django.utils.module_loading import autodiscover_modules

from django_dsched.changes import edits, pauses
from django_dsched.changes.calendar_use import check_calendars
from django_dsched.changes.constraints import validate_new
from django_dsched.changes.routes import check_routed
from django_dsched.changes.specs import grid_step, in_callers_words
from django_dsched.conf import app_settings
from django_dsched.enums import LIVE, ScheduleKind, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ConfigurationError, ValidationError
from django_dsched.models import Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.models.validators import validate_plain_text
from django_dsched.outbox.handlers import registry
from django_dsched.outbox.messages import Message
from django_dsched.runtime.logs import get_logger

F = TypeVar("F", bound=Callable[..., Any])

logger = get_logger(__name__)

MODULE_NAME = "dsched_schedules"
REMOVED = "removed from code"
ACTOR = "code"

# Keys of a declaration and the Schedule field each one sets.
FIELD_OF = {
    "every": "frequency_time",
    "unit": "frequency_unit",
    "cron": "cron_expression",
    "time_zone": "time_zone",
    "start": "start_ts",
    "at": "start_ts",
    "end": "end_ts",
    "max_fires": "max_fires",
    "topic": "event_topic",
    "event_type": "event_type",
    "data": "event_data",
    "priority": "priority",
    "misfire_policy": "misfire_policy",
    "misfire_grace_seconds": "misfire_grace_seconds",
    "catch_up_limit": "catch_up_limit",
    "jitter_seconds": "jitter_seconds",
    "health_grace_seconds": "health_grace_seconds",
    "failure_tolerance": "failure_tolerance",
    "max_runtime_seconds": "max_runtime_seconds",
    "monitored": "monitored",
    # The overlap and failure policies (docs/overlap.md).
    "overlap_policy": "overlap_policy",
    "pause_on_failure": "pause_on_failure",
    # A recurrence rule, and calendars (names or ids of the host's or the operator's).
    "rrule": "rrule",
    "calendars": "calendar_ids",
    "calendar_policy": "calendar_policy",
}

_registry: dict[str, dict[str, Any]] = {}

# The start a declaration without one is checked from (:func:`problem`).
_ANY_START = datetime(2000, 1, 1, tzinfo=UTC)


def declare(name: str, **spec: Any) -> None:
    """Declare a schedule in code (what ``@periodic`` and ``DSCHED_SCHEDULES`` do)."""
    unknown = _unknown_keys(spec)
    if unknown:
        raise ConfigurationError(f"schedule {name!r}: unknown keys {unknown}")
    _registry[name] = spec


def _unknown_keys(spec: Mapping[str, Any]) -> list[str]:
    return sorted(map(str, set(spec) - set(FIELD_OF) - {"host_id"}))


def periodic(
    name: str, *, topic: str, event_type: str | None = None, **spec: Any
) -> Callable[[F], F]:
    """Declare a schedule whose events are handled by the decorated function."""

    def decorator(func: F) -> F:

        kind = event_type or f"{func.__module__}.{func.__qualname__}"
        declare(name, topic=topic, event_type=kind, **spec)
        host = spec.get("host_id")
        registry.register(
            func,
            event_type=kind,
            hosts=None if host is None else [host],
            check=DeclaredOnly(name, kind, host),
        )
        return func

    return decorator


class DeclaredOnly:
    """A ``@periodic`` function's check: a message is its declared schedule's (the
    envelope's ``subject``, which the database writes from the event's schedule, is the
    schedule of that host and name declared in code), or it is refused, saying why."""

    def __init__(self, name: str, event_type: str, host: Any) -> None:
        self.name = name
        self.event_type = event_type
        self.host = host
        self._known: set[str] = set()  # schedule ids found to be the declared one

    def __call__(self, message: Message) -> str | None:
        subject = message.payload.get("subject")
        if isinstance(subject, str):
            if subject in self._known:
                return None
            if self._found(subject) == (resolve_host(self.host), self.name, ScheduleOrigin.CODE):
                self._known.add(subject)
                return None
        return (
            f"event type {self.event_type!r} is the @periodic job {self.name!r}'s: its "
            f"function runs only for the schedule declared for it, not for schedule {subject}"
        )

    @staticmethod
    def _found(schedule_id: str) -> tuple[Any, ...] | None:
        """The host, name and origin of the schedule ``schedule_id``; None if there is none."""
        try:
            return (
                Schedule.objects.filter(pk=schedule_id)
                .values_list("host_id", "schedule_name", "origin")
                .first()
            )
        except django_exceptions.ValidationError:  # not a schedule id
            return None


def declarations() -> dict[str, Mapping[str, Any]]:
    """All declarations: settings first, then those registered in code."""
    autodiscover_modules(MODULE_NAME)
    schedules: Any = app_settings.SCHEDULES  # what the project wrote, whatever its type
    if not isinstance(schedules, Mapping):
        raise ValidationError("DSCHED_SCHEDULES must be a dict of {name: declaration}.")
    return {**schedules, **_registry}


def problem(name: Any, spec: Any) -> str | None:
    """Why the sync would refuse the declaration ``name``, found without the database (for
    ``check``: dsched.W006); None if it would not. Its fields are cleaned as the sync's
    save cleans them (a time may be ISO text), then validated as a create is. A declaration
    without a start is checked from a fixed start (no clock is read), which finds a
    timetable that never fires at all; one that could have fired only before now, or one a
    quota refuses, is refused by the sync alone."""
    if not isinstance(name, str):
        return "its name must be a string"
    if not isinstance(spec, Mapping):
        return "must be a dict (cron=, every=, rrule= or at=, topic=, event_type=, ...)"
    unknown = _unknown_keys(spec)
    if unknown:
        return f"unknown keys {unknown}"
    try:
        validate_plain_text(name)
        values = fields_of(spec)
        if values.get("start_ts") in (None, ""):  # the sync starts it now
            values["start_ts"] = _ANY_START
        values.pop("calendar_ids", None)  # names: the sync resolves them (a query)
        schedule = Schedule(
            schedule_name=name,
            host_id=resolve_host(spec.get("host_id")),
            origin=ScheduleOrigin.CODE,
            **values,
        )
        schedule.clean_fields(exclude=["schedule_id"])
        validate_new(schedule)
        check_routed(schedule)
    except django_exceptions.ValidationError as exc:
        return "; ".join(in_callers_words(exc, spec).messages)
    except (ConfigurationError, TypeError, ValueError) as exc:
        return str(exc)
    return None


KINDS = {
    "cron": ScheduleKind.CRON,
    "every": ScheduleKind.INTERVAL,
    "at": ScheduleKind.ONCE,
    "rrule": ScheduleKind.RRULE,
}


def kind_of(spec: Mapping[str, Any]) -> str:
    present = [key for key in KINDS if key in spec]
    if len(present) != 1:
        raise ValidationError("give exactly one of cron=, every=, rrule= or at=")
    return KINDS[present[0]]


def fields_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    values = {FIELD_OF[key]: value for key, value in spec.items() if key in FIELD_OF}
    values["schedule_kind"] = kind_of(spec)
    if "every" in spec:  # as api.create_interval takes them: a timedelta, a unit in any case
        values["frequency_time"], values["frequency_unit"] = grid_step(
            spec["every"], spec.get("unit")
        )
    values.setdefault("event_data", {})
    return values


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    reactivated: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def sync(specs: Mapping[str, Mapping[str, Any]] | None = None) -> SyncReport:
    """Make the database's code-declared schedules match the declarations (idempotent)."""
    specs = declarations() if specs is None else specs
    report = SyncReport()
    with transaction.atomic(using=app_settings.DATABASE):
        declared_keys = set()
        for name, spec in sorted(specs.items(), key=lambda item: str(item[0])):
            if not isinstance(spec, Mapping):
                raise ValidationError(f"declared schedule {name!r}: must be a dict")
            host = resolve_host(spec.get("host_id"))
            declared_keys.add((host, name))
            try:
                _sync_one(name, host, spec, report)
            except django_exceptions.ValidationError as exc:
                said = "; ".join(in_callers_words(exc, spec).messages)
                message = f"declared schedule {name!r}: {said}"
                raise ValidationError(message) from None
        for schedule in Schedule.objects.filter(origin=ScheduleOrigin.CODE).filter(state__in=LIVE):
            if (schedule.host_id, schedule.schedule_name) in declared_keys:
                continue
            if schedule.state == ScheduleState.ACTIVE:
                pauses.pause(Schedule.objects.filter(pk=schedule.pk), actor=ACTOR, reason=REMOVED)
                report.deactivated.append(schedule.schedule_name)
    for bucket in ("created", "updated", "deactivated", "reactivated", "conflicts"):
        for name in getattr(report, bucket):
            logger.info("sync: %s %s", bucket, name)
    return report


def _sync_one(name: str, host: Any, spec: Mapping[str, Any], report: SyncReport) -> None:
    validate_plain_text(name)  # before it is looked up (PostgreSQL text cannot hold NUL)
    values = fields_of(spec)
    if values.get("calendar_ids"):  # names or ids, as ids (compared with the stored ones)
        named = Schedule(host_id=host, calendar_ids=values["calendar_ids"])
        check_calendars(named)
        values["calendar_ids"] = named.calendar_ids
    outcome, schedule = upsert(name, host, values)
    getattr(report, outcome).append(name)
    if (
        schedule is not None
        and schedule.state == ScheduleState.PAUSED
        and schedule.paused_reason == REMOVED
    ):
        pauses.resume(Schedule.objects.filter(pk=schedule.pk), actor=ACTOR)
        report.reactivated.append(name)


def upsert(
    name: str,
    host: Any,
    values: Mapping[str, Any],
    *,
    origin: str = ScheduleOrigin.CODE,
    actor: str = ACTOR,
) -> tuple[str, Schedule | None]:
    """Create the schedule ``name`` of ``host`` with ``values`` (Schedule fields), or update it.

    Returns ``("created" | "updated" | "unchanged" | "conflicts", schedule)``. Only a schedule
    of the same ``origin`` is updated (others are conflicts, left alone, returned as None); an
    update writes only the fields that differ, through :func:`edits.save_schedule`, so the
    schedule keeps its place on the grid unless a timing field changed. Cancelled and
    completed schedules are left as they are ("unchanged"). The caller holds the transaction.
    """
    existing = Schedule.objects.select_for_update().filter(host_id=host, schedule_name=name).first()
    if existing is None:
        schedule = Schedule(schedule_name=name, host_id=host, origin=origin, **values)
        edits.save_schedule(schedule, actor=actor)
        return "created", schedule
    if existing.origin != origin:
        logger.warning(
            "sync: %r exists and has another origin (%s, not %s); left alone",
            name,
            existing.origin,
            origin,
        )
        return "conflicts", None
    if existing.state in (ScheduleState.CANCELLED, ScheduleState.COMPLETED):
        return "unchanged", existing
    changed = []
    for field_name, value in values.items():
        current = getattr(existing, field_name)
        if isinstance(value, datetime) and isinstance(current, datetime):
            same = value == current
        else:
            same = current == value
        if not same:
            setattr(existing, field_name, value)
            changed.append(field_name)
    if changed:
        edits.save_schedule(existing, changed, actor=actor)
        return "updated", existing
    return "unchanged", existing


def sync_after_migrate(sender: Any, **kwargs: Any) -> None:
    """post_migrate receiver: sync when the app's tables exist and syncing is on."""
    if not app_settings.SYNC_ON_MIGRATE or kwargs.get("using", "default") != app_settings.DATABASE:
        return
    if not declarations():
        return
    try:
        report = sync()
    except ValidationError as exc:  # said as a command's error, not a traceback
        raise CommandError("; ".join(exc.messages)) from None
    if kwargs.get("verbosity", 1) >= 1 and (report.created or report.updated or report.deactivated):
        print(
            f"  django-dsched: {len(report.created)} created, {len(report.updated)} updated, "
            f"{len(report.deactivated)} deactivated declared schedule(s)"
        )
