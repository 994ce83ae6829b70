from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from django_dsched.conf import app_settings
from django_dsched.management._arguments import positive_days, positive_int
from django_dsched.outbox.retention import count_expired, purge_expired


class Command(BaseCommand):
    help = (
        "Delete delivered outbox messages and events older than the retention "
        "(DSCHED_RETENTION_DAYS), in small batches. Dead letters and pending messages stay."
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
        if days is None and app_settings.RETENTION_DAYS is None:
            self.stdout.write("Retention is off (DSCHED_RETENTION_DAYS = None); nothing to do.")
            return
        if dry_run:
            found = count_expired(days=days)
            self.stdout.write(
                f"Would delete {found.outbox} outbox message(s) and {found.events} event(s)."
            )
            return
        purged = purge_expired(days=days, batch_size=batch_size)
        if verbosity:
            self.stdout.write(
                f"Deleted {purged.outbox} outbox message(s) and {purged.events} event(s)."
            )
