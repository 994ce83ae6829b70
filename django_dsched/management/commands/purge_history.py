from __future__ import annotations

import argparse
from datetime import UTC, date
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DatabaseError

from django_dsched.conf import app_settings
from django_dsched.history import horizon
from django_dsched.history.partitions import make_ahead
from django_dsched.management._arguments import positive_days, positive_int
from django_dsched.outbox.retention import Purged, count_expired, purge_expired
from django_dsched.runtime.loops import first_line


class Command(BaseCommand):
    help = (
        "Drop the days of history older than the retention (DSCHED_RETENTION_DAYS) that no "
        "pending message or dead letter holds, delete the default partition's expired rows in "
        "small batches, and make the next days' partitions (and the exactly-once index of a "
        "day partition that lacks it). Dead letters and pending messages stay. The history's "
        "horizon moves to the cutoff first: no backfill reaches before it afterwards, whatever "
        "the retention setting says."
    )
    requires_migrations_checks = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--days",
            type=positive_days,
            help=f"Keep this many days instead (default: {app_settings.RETENTION_DAYS}).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            help=f"Rows per transaction (default: {app_settings.RETENTION_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(
        self,
        *,
        verbosity: int,
        days: float | None,
        batch_size: int | None,
        dry_run: bool,
        **options: Any,
    ) -> None:
        if not dry_run:
            self._make_days(verbosity)
        if days is None and app_settings.RETENTION_DAYS is None:
            self.stdout.write("Retention is off (DSCHED_RETENTION_DAYS = None); nothing to do.")
            return
        if dry_run:
            found = count_expired(days=days)
            if found.days:
                self.stdout.write(
                    f"Would drop the days {_days(found.days)} ({found.day_events} event(s), "
                    f"{found.day_outbox} outbox message(s))."
                )
            self.stdout.write(
                f"Would delete {found.outbox} outbox message(s) and {found.events} event(s)."
            )
            self._held(found)
            return
        purged = purge_expired(days=days, batch_size=batch_size)
        if verbosity:
            if purged.days:
                self.stdout.write(f"Dropped the days {_days(purged.days)}.")
            self.stdout.write(
                f"Deleted {purged.outbox} outbox message(s) and {purged.events} event(s)."
            )
        if purged.skipped:
            self.stdout.write(f"Could not drop {_days(purged.skipped)} yet (a lock); run again.")
        self._held(purged)
        since = horizon.complete_since()
        if verbosity and since is not None:
            self.stdout.write(
                f"History is complete since {since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC: "
                "no backfill reaches before it."
            )

    def _make_days(self, verbosity: int) -> None:
        """Make the days ahead. Not having made them (a lock, a row the database refuses to
        move into its day, the connection lost) is said and does not keep retention from
        running: fires go into the default partition meanwhile."""
        try:
            made = make_ahead()
        except DatabaseError as exc:
            self.stderr.write(f"Could not make the days ahead ({first_line(exc)}).")
            return
        if verbosity and made.made:
            self.stdout.write(f"Made the partitions of {_days(made.made)}.")
        if made.skipped:
            self.stdout.write(
                f"Could not make the partitions of {_days(made.skipped)} yet (a lock)."
            )
        for day, error in made.refused:
            self.stderr.write(
                f"Could not make the partitions of {day:%Y-%m-%d}: the database refused to move "
                f"a row of that day out of the default partition ({error})."
            )
        for name in made.indexed:
            self.stdout.write(f"Made the unique (aggregate_id, scheduled_ts) index of {name}.")
        if made.index_skipped:
            self.stdout.write(
                f"Could not index {', '.join(made.index_skipped)} yet (a lock); run again."
            )
        for name in made.index_failed:
            self.stderr.write(
                f"Could not make the unique (aggregate_id, scheduled_ts) index of {name}: "
                "see the error logged."
            )

    def _held(self, purged: Purged) -> None:
        for held in purged.held:
            self.stdout.write(f"Kept {held.describe()}.")


def _days(days: tuple[date, ...]) -> str:
    return ", ".join(day.isoformat() for day in days)
