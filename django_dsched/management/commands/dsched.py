from __future__ import annotations

import argparse
from datetime import UTC, datetime, tzinfo
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from django_dsched import api
from django_dsched.changes import permissions as rules
from django_dsched.changes import unchanged
from django_dsched.changes.describe import both_times, describe, is_utc, zone_of
from django_dsched.cluster.status import cluster_status
from django_dsched.conf import app_settings
from django_dsched.declared import sync
from django_dsched.enums import UNHEALTHY, Health, OverlapPolicy, ScheduleState
from django_dsched.exceptions import ConfigurationError, NotPermitted
from django_dsched.firing import outlook
from django_dsched.health import judge
from django_dsched.importers.celery_beat import import_celery_beat
from django_dsched.management import _arguments
from django_dsched.models import Calendar, Schedule
from django_dsched.models.schedule import resolve_host
from django_dsched.runtime.clock import database_now
from django_dsched.runtime.tables import ours_missing
from django_dsched.runtime.text import escape_control_characters as shown


def aware_datetime(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} has no offset; write it like 2026-12-01T09:00:00+01:00"
        )
    return parsed


# The capability each action needs when run as a user (--user); pause, resume, cancel,
# trigger and backfill are checked by the Python API and the services they call, which
# also check what a resume with --catch-up fires.
NEEDS = {
    "list": rules.VIEW,
    "show": rules.VIEW,
    "preview": rules.VIEW,
    "cluster": rules.VIEW_CLUSTER,
}
OPERATOR_ONLY = ("sync", "import-celery-beat")


def _at(moment: datetime | None, schedule: Schedule) -> str:
    """A time of ``schedule`` as people read it: on its zone's wall clock, then in UTC
    (``2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)``; a UTC schedule's once)."""
    return "-" if moment is None else both_times(moment, zone_of(schedule))


def calendar_names(ids: list[Any]) -> str:
    """The calendars ``ids`` by name, in order (a deleted one by its id)."""
    names = dict(Calendar.objects.filter(pk__in=ids).values_list("pk", "name"))
    return ", ".join(str(names.get(calendar_id, calendar_id)) for calendar_id in ids)


def when(schedule: Schedule) -> str:
    """What comes next for ``schedule``: its next fire when it is active, else its state
    ("paused until ...", "completed", "cancelled", "set aside")."""
    if schedule.state == ScheduleState.ACTIVE:
        held = " (held for a run)" if schedule.held_by is not None else ""
        return f"next {_at(schedule.next_run_ts, schedule)}{held}"
    if schedule.state == ScheduleState.PAUSED:
        if schedule.paused_until is not None:
            return f"paused until {_at(schedule.paused_until, schedule)}"
        return "paused until resumed"
    return str(schedule.get_state_display())


def _health(verdict: judge.Verdict, schedule: Schedule) -> str:
    """A health verdict on one line: ``LATE since 2026-11-27 05:28:37 UTC: why``."""
    since = f" since {_at(verdict.since, schedule)}" if verdict.since is not None else ""
    return f"{verdict.state}{since}: {shown(verdict.text)}" if verdict.text else verdict.state


def iso_times(moment: datetime, zone: tzinfo) -> str:
    """A preview line: ISO 8601 on the schedule's zone, then in UTC (a UTC schedule's once)."""
    utc = moment.astimezone(UTC).isoformat()
    return utc if is_utc(zone) else f"{moment.astimezone(zone).isoformat()}  {utc}"


def _who(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--user``, on the command and on each action (unset unless given,
    so that one given before the action is not unset by the action's parser)."""
    parser.add_argument(
        "--host",
        type=_arguments.host_id,
        default=argparse.SUPPRESS,
        help="Tenant (host_id); default DSCHED_DEFAULT_HOST_ID.",
    )
    parser.add_argument(
        "--user",
        default=argparse.SUPPRESS,
        help="Act as this user (username): each action needs the user's permission, as "
        "in the admin and the REST API, and the user is the audit actor. Default: the "
        "operator, who may do everything (actor manage.py).",
    )


def _schedule_actions(actions: Any, common: argparse.ArgumentParser) -> None:
    """The actions on one schedule (named or by id), with their own options."""
    for name, text in (
        ("show", "One schedule's definition and status."),
        ("resume", "Resume a paused or set-aside schedule."),
        ("cancel", "Cancel a schedule for good."),
        ("trigger", "Fire a schedule once now."),
        ("preview", "The next fire times."),
        ("pause", "Pause a schedule."),
        ("backfill", "Fire the past slots of a range once each."),
        ("policy", "Set the overlap policy and pause on failure (docs/overlap.md)."),
    ):
        sub = actions.add_parser(name, help=text, parents=[common])
        sub.add_argument("schedule", help="Name or id.")
        if name == "pause":
            sub.add_argument("--reason", default="")
            sub.add_argument("--until", type=aware_datetime, help="Resume by itself then.")
        elif name == "resume":
            sub.add_argument(
                "--catch-up",
                action="store_true",
                help="Fire missed slots per the misfire policy (default: go on from now).",
            )
        elif name == "preview":
            sub.add_argument("-n", "--count", type=int, default=10)
        elif name == "backfill":
            sub.add_argument("--start", type=aware_datetime, required=True)
            sub.add_argument("--end", type=aware_datetime, required=True)
        elif name == "policy":
            sub.add_argument(
                "--overlap",
                choices=OverlapPolicy.values,
                help="What a due slot does while the previous run is still going.",
            )
            sub.add_argument(
                "--pause-on-failure",
                action=argparse.BooleanOptionalAction,
                help="Pause the schedule when one of its runs becomes a dead letter.",
            )


class Command(BaseCommand):
    help = (
        "Operate schedules: list, show, preview, pause, resume, cancel, trigger, backfill, "
        "policy, sync; see the cluster."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _who(parser)
        # Taken after the action too (`dsched show NAME --host ...`); before it, as ever.
        common = argparse.ArgumentParser(add_help=False)
        _who(common)
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser(
            "list", help="Schedules with their next fire times.", parents=[common]
        )
        listing.add_argument("--state", choices=ScheduleState.values)
        listing.add_argument(
            "--unhealthy",
            action="store_true",
            help="Only the schedules that want attention (health LATE, STUCK, FAILING or "
            "SET_ASIDE), each with since when and why.",
        )
        listing.add_argument(
            "--health", choices=Health.values, help="Only the schedules in this health state."
        )
        _schedule_actions(actions, common)
        actions.add_parser(
            "sync", help="Sync schedules declared in code to the database.", parents=[common]
        )
        actions.add_parser(
            "cluster",
            help="The instances, the leader or each bucket's holder, owner and standbys.",
            parents=[common],
        )
        importer = actions.add_parser(
            "import-celery-beat",
            help="Create schedules from django-celery-beat's periodic tasks (Celery transport).",
            parents=[common],
        )
        importer.add_argument(
            "--dry-run", action="store_true", help="Report what would be done; write nothing."
        )
        importer.add_argument(
            "--disable-source",
            action="store_true",
            help="Disable the imported PeriodicTasks (same transaction): beat stops firing them.",
        )
        importer.add_argument(
            "--topic",
            type=_arguments.topic,
            default="celery",
            help="Topic of the imported schedules; route it to the Celery transport "
            "(default %(default)r).",
        )

    def handle(
        self, *, action: str, host: str | None = None, user: str | None = None, **options: Any
    ) -> None:
        if action in OPERATOR_ONLY and user is not None:
            raise CommandError(
                f"{action} acts for the whole deployment, not for a user: run it without --user."
            )
        self.actor: Any = "manage.py" if user is None else self._user(user)
        try:
            needed = NEEDS.get(action)
            if needed is not None:
                rules.require(self.actor, needed)
            getattr(self, f"do_{action.replace('-', '_')}")(host=host, **options)
        except NotPermitted as exc:
            raise CommandError(str(exc)) from None
        except Schedule.DoesNotExist:
            raise CommandError(
                f"No schedule {options.get('schedule')!r} on host {resolve_host(host)} "
                "(another host: --host HOST_ID)."
            ) from None
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        except (ValueError, ConfigurationError) as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            missing = ours_missing(exc, connections[app_settings.DATABASE])
            if missing is None:
                raise
            raise CommandError(str(missing)) from None

    @staticmethod
    def _user(username: str) -> Any:
        model = get_user_model()
        try:
            return model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            raise CommandError(f"No user {username!r}.") from None

    def do_list(
        self,
        *,
        host: str | None,
        state: str | None,
        unhealthy: bool = False,
        health: str | None = None,
        **options: Any,
    ) -> None:
        wanted = UNHEALTHY if unhealthy else health
        rows = api.schedules(host_id=host, state=state, health=wanted)
        for schedule in rows:
            line = (
                f"{shown(schedule.schedule_name):<32} {schedule.state:<9} "
                f"{when(schedule):<30}  {describe(schedule)}"
            )
            if wanted is not None:
                line += f"  health: {_health(judge.verdict(schedule), schedule)}"
            elif schedule.state == ScheduleState.SET_ASIDE:
                line += f"  error: {shown(schedule.set_aside_reason)}"
            self.stdout.write(line)

    def do_show(self, *, host: str | None, schedule: str, **options: Any) -> None:
        status = api.status(schedule, host_id=host)
        found = api.get(schedule, host_id=host)
        self.stdout.write(f"{shown(found.schedule_name)} ({found.schedule_id})")
        self.stdout.write(f"  {'timing':<10} {describe(found)}")
        if found.rrule:
            self.stdout.write(f"  {'rule':<10} {shown(' / '.join(found.rrule.splitlines()))}")
        if found.calendar_ids:
            names = calendar_names(found.calendar_ids)
            self.stdout.write(f"  {'calendars':<10} {shown(names)}  ({found.calendar_policy})")
        self.stdout.write(f"  {'topic':<10} {found.event_topic}  type {found.event_type}")
        zone = zone_of(found)
        if not is_utc(zone):
            self.stdout.write(f"  {'zone':<10} {found.time_zone} (times: there, then UTC)")
        if found.start_ts is not None:
            self.stdout.write(f"  {'start':<10} {_at(found.start_ts, found)}")
        if found.end_ts is not None:
            self.stdout.write(f"  {'end':<10} {_at(found.end_ts, found)}")
        active = status.state == ScheduleState.ACTIVE
        for label, value in (
            ("state", status.state),
            ("next", _at(status.next_fire, found) if active else when(found)),
            ("last", _at(status.last_fired, found)),
            ("delivery", status.last_delivery),
            ("run", status.last_run),
            ("fires", status.fire_count),
            ("misfires", status.misfire_count),
            ("overlap", status.overlap_policy),
            ("on failure", "pause" if status.pause_on_failure else "go on"),
            ("skipped", status.skip_count),
            ("buffered", status.buffer_count),
            ("held for", status.held_for),
            ("version", status.version),
        ):
            self.stdout.write(f"  {label:<10} {'-' if value is None else value}")
        verdict = judge.Verdict(
            status.health, status.health_since, status.health_reason, status.health_error
        )
        self.stdout.write(f"  {'health':<10} {_health(verdict, found)}")
        # The newest delivery's error: why a fire did not reach its handler ("-": none).
        self.stdout.write(f"  {'last error':<10} {shown(status.last_error) or '-'}")
        if status.paused_reason or status.paused_until:
            reason = shown(status.paused_reason)
            until = _at(status.paused_until, found) if status.paused_until else "resumed"
            self.stdout.write(f"  {'paused':<10} {reason} until {until}")
        if status.set_aside_reason:
            aside = _at(status.set_aside_at, found)
            self.stdout.write(
                f"  {'set aside':<10} {shown(status.set_aside_reason)} (since {aside})"
            )

    def do_preview(self, *, host: str | None, schedule: str, count: int, **options: Any) -> None:
        found = api.get(schedule, host_id=host)
        zone = zone_of(found)
        # Each fire time; a fire a calendar moved says from where, and why; a slot a
        # calendar drops says so (api.preview_slots); and what the overlap policy does to
        # each fire, where that can be told.
        slots = api.preview_slots(found, count, host_id=host)
        times = [slot.runs_at for slot in slots if slot.runs_at is not None]
        notes = iter([""] * len(times))
        if found.overlap_policy != OverlapPolicy.ALLOW_ALL and times:
            with connections[app_settings.DATABASE].cursor() as cursor:
                run = outlook.previous_run(cursor, found.pk)
            notes = iter(outlook.preview_notes(found, times, run, database_now()))
        for slot in slots:
            if slot.runs_at is None:
                self.stdout.write(f"{iso_times(slot.slot, zone)}  not fired: {shown(slot.reason)}")
                continue
            said = [iso_times(slot.runs_at, zone)]
            said += [shown(slot.reason)] if slot.fate == "shifted" else []
            said += [note for note in [next(notes)] if note]
            self.stdout.write("  ".join(said))

    def do_policy(
        self,
        *,
        host: str | None,
        schedule: str,
        overlap: str | None,
        pause_on_failure: bool | None,
        **options: Any,
    ) -> None:
        if overlap is None and pause_on_failure is None:
            raise CommandError("Give --overlap, --pause-on-failure or --no-pause-on-failure.")
        found = api.set_policies(
            schedule,
            overlap_policy=overlap,
            pause_on_failure=pause_on_failure,
            host_id=host,
            actor=self.actor,
        )
        self.stdout.write(
            f"{shown(found.schedule_name)}: overlap {found.overlap_policy}, "
            f"{'pause' if found.pause_on_failure else 'go on'} on failure."
        )

    def _report(self, done: bool, yes: str, change: str, host: str | None, schedule: str) -> None:
        """``yes``, or an error saying why ``change`` did nothing (the schedule's state)."""
        if not done:
            found = api.get(schedule, host_id=host)
            raise CommandError(f"{shown(unchanged.why_not(change, found))} Nothing done.")
        self.stdout.write(yes)

    def do_pause(
        self,
        *,
        host: str | None,
        schedule: str,
        reason: str,
        until: datetime | None,
        **options: Any,
    ) -> None:
        done = api.pause(schedule, reason=reason, until=until, host_id=host, actor=self.actor)
        self._report(done, f"Paused {schedule}.", "pause", host, schedule)

    def do_resume(self, *, host: str | None, schedule: str, catch_up: bool, **options: Any) -> None:
        done = api.resume(schedule, catch_up=catch_up, host_id=host, actor=self.actor)
        self._report(done, f"Resumed {schedule}.", "resume", host, schedule)

    def do_cancel(self, *, host: str | None, schedule: str, **options: Any) -> None:
        done = api.cancel(schedule, host_id=host, actor=self.actor)
        self._report(done, f"Cancelled {schedule}.", "cancel", host, schedule)

    def do_trigger(self, *, host: str | None, schedule: str, **options: Any) -> None:
        api.trigger(schedule, host_id=host, actor=self.actor)
        self.stdout.write(f"Fired {schedule} once.")

    def do_backfill(
        self, *, host: str | None, schedule: str, start: datetime, end: datetime, **options: Any
    ) -> None:
        fired, already = api.backfill(schedule, start, end, host_id=host, actor=self.actor)
        if fired + already == 0:
            found = api.get(schedule, host_id=host)
            self.stdout.write(f"Fired nothing: {unchanged.no_slot(found, start, end)}")
            return
        self.stdout.write(f"Fired {fired} slot(s); {already} had already fired.")

    def do_cluster(self, **options: Any) -> None:

        status = cluster_status()
        write = self.stdout.write
        write(f"database time {status.now:%Y-%m-%d %H:%M:%S%z}, lease {status.lease_seconds:g} s")
        if status.stored_bucket_count not in (None, status.bucket_count):
            write(
                f"WARNING: DSCHED_BUCKETS is {status.bucket_count} here but the cluster in the "
                f"database runs with {status.stored_bucket_count}"
            )
        write("instances:")
        for item in status.instances:
            row = item.row
            state = "stale" if item.stale else row.role
            write(
                f"  {shown(row.instance_id):<32} {state:<8} {shown(row.hostname)}:{row.pid}"
                f"  seen {item.seen_seconds:.1f} s ago, up {item.up_seconds:.0f} s"
            )
        if status.buckets is None:
            leader = status.leader
            if leader is None:
                write("leader: none (no scheduler has taken the lease)")
            else:
                state = "released" if leader.released else ("live" if leader.live else "expired")
                write(
                    f"leader: {shown(leader.instance_id)} epoch {leader.epoch} {state}, "
                    f"heartbeat {leader.heartbeat_seconds:.1f} s ago"
                )
        else:
            held = sum(1 for b in status.buckets if b.live)
            write(f"buckets: {held} of {status.bucket_count} held")
            header = f"{'held by':<24} {'owner':<24} {'standby':<24} epoch  heartbeat"
            write(f"  {'bucket':>6}  {header}")
            for b in status.buckets:
                beat = "released" if b.heartbeat_seconds is None else f"{b.heartbeat_seconds:.1f} s"
                write(
                    f"  {b.bucket:>6}  {shown(b.holder if b.live else '-'):<24} "
                    f"{shown(b.owner or '-'):<24} {shown(', '.join(b.standbys) or '-'):<24} "
                    f"{b.epoch:>5}  {beat}"
                )
        write(
            f"due now {status.due}; fires last minute {status.fires_minute}; "
            f"undelivered {status.pending}; dead letters {status.dead_letters}"
        )
        days = status.history
        if days is not None and days.count:
            write(f"history: {days.count} day(s) from {days.first} to {days.last}")
            for kept in days.held:
                write(f"  kept past the retention: {kept.describe()}")
        self._circuits(status.circuits or [])

    def _circuits(self, circuits: list[Any]) -> None:
        """The destinations relays hold back (open circuits)."""
        write = self.stdout.write
        if not circuits:
            write("open circuits: none")
            return
        write(f"open circuits: {len(circuits)}")
        for item in circuits:
            row = item.row
            if item.stale:
                when = "stale (its relay stopped reporting)"
            elif item.seconds_left > 0:
                when = f"held back {item.seconds_left:.0f} s more"
            else:
                when = "probing"
            write(
                f"  {shown(row.route)} host {row.host or '-'} at relay {shown(row.relay_id)}: "
                f"{row.state}, {row.failures} failure(s) in a row, {when}; "
                f"last error: {shown(row.last_error[:200])}"
            )

    def do_sync(self, *, host: str | None, **options: Any) -> None:
        report = sync()
        self.stdout.write(
            f"created {len(report.created)}, updated {len(report.updated)}, unchanged "
            f"{len(report.unchanged)}, deactivated {len(report.deactivated)}, reactivated "
            f"{len(report.reactivated)}, left alone (not from code) {len(report.conflicts)}"
        )

    def do_import_celery_beat(
        self,
        *,
        host: str | None,
        dry_run: bool,
        disable_source: bool,
        topic: str,
        **options: Any,
    ) -> None:

        report = import_celery_beat(
            dry_run=dry_run, disable_source=disable_source, topic=topic, host_id=host
        )
        if dry_run:
            self.stdout.write("Dry run: nothing was written; this is what would be done.")
        self.stdout.write(
            f"created {len(report.created)}, updated {len(report.updated)}, unchanged "
            f"{len(report.unchanged)}, paused {len(report.paused)}, resumed "
            f"{len(report.resumed)}, not imported {len(report.not_imported)}, disabled in beat "
            f"{len(report.disabled_in_beat)}"
        )
        for label, names in (
            ("created", report.created),
            ("updated", report.updated),
            ("paused", report.paused),
            ("resumed", report.resumed),
            ("disabled in beat", report.disabled_in_beat),
            ("no PeriodicTask any more", report.orphaned),
        ):
            for name in names:
                self.stdout.write(f"  {label}: {shown(name)}")
        for name, reason in report.not_imported:
            self.stdout.write(f"  not imported: {shown(name)}: {shown(reason)}")
        for note in report.notes:
            self.stdout.write(note)
