from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from django_dsched.conf import app_settings
from django_dsched.exceptions import BucketCountMismatch
from django_dsched.history.partitions import make_ahead
from django_dsched.management._arguments import instance_id, positive_float, positive_int
from django_dsched.management._process import (
    add_endpoint_arguments,
    configure_logging,
    connection_options,
    endpoints,
    fail_if_stood_by,
    reach_database,
    relay_thread,
    require_metrics,
    stop_on_signals,
)
from django_dsched.metrics.relay import relay_metrics
from django_dsched.metrics.scheduler import scheduler_metrics
from django_dsched.outbox.relay import Relay
from django_dsched.runtime.loops import first_line
from django_dsched.scheduler import Scheduler


class Command(BaseCommand):
    help = (
        "Run a scheduler instance. Run one on as many machines as you like: one leads and "
        "fires due schedules, the others stand by and take over if it stops."
    )
    # Checked once the database is reached (reach_database), not before anything can wait.
    requires_migrations_checks = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--instance-id",
            type=instance_id,
            help="Name of this instance in the lease and the logs (default: host:pid).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            help=f"Schedules fired per transaction (default: {app_settings.BATCH_SIZE}).",
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_float,
            help=(
                "Longest sleep, in seconds, between checks for due schedules "
                f"(default: {app_settings.POLL_INTERVAL})."
            ),
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help=(
                "Make the next days' partitions, take the lead if free, fire what is due "
                "now, release the lead and exit."
            ),
        )
        parser.add_argument(
            "--max-iterations",
            type=positive_int,
            help="Stop after this many rounds of the loop (for tests and operators).",
        )
        parser.add_argument(
            "--with-relay",
            action="store_true",
            help=(
                "Also run an outbox relay in this process, on its own thread and database "
                "connection (one command for small deployments; off by default)."
            ),
        )
        add_endpoint_arguments(parser)

    def handle(
        self,
        *,
        verbosity: int,
        instance_id: str | None,
        batch_size: int | None,
        poll_interval: float | None,
        once: bool,
        max_iterations: int | None,
        with_relay: bool = False,
        metrics_port: int = 0,
        health_port: int = 0,
        database_metrics: bool = False,
        **options: Any,
    ) -> None:
        if once and max_iterations:
            raise CommandError("Use --once or --max-iterations, not both.")
        metrics_on = require_metrics(metrics_port, database_metrics)
        configure_logging(verbosity)
        connection_options()
        scheduler = Scheduler(
            instance_id=instance_id,
            batch_size=batch_size,
            poll_interval=poll_interval,
            metrics=scheduler_metrics() if metrics_on else None,
        )
        relay = (
            Relay(
                instance_id=f"{scheduler.instance_id}/relay",
                metrics=relay_metrics() if metrics_on else None,
            )
            if with_relay
            else None
        )
        try:
            self._run(
                scheduler,
                relay,
                once,
                max_iterations,
                verbosity,
                metrics_port,
                health_port,
                database_metrics,
            )
        except BucketCountMismatch as exc:
            # Another DSCHED_BUCKETS than the running cluster's: never join it.
            raise CommandError(str(exc)) from exc

    def _run(
        self,
        scheduler: Scheduler,
        relay: Relay | None,
        once: bool,
        max_iterations: int | None,
        verbosity: int,
        metrics_port: int,
        health_port: int,
        database_metrics: bool,
    ) -> None:
        loops = [scheduler] if relay is None else [scheduler, relay]
        with (
            stop_on_signals(scheduler),
            endpoints(loops, metrics_port, health_port, database_metrics),
        ):
            if not reach_database(self, scheduler, once=once):
                scheduler.shutdown()
            elif once:
                self._make_days(scheduler.using, verbosity)
                fired = scheduler.run_until_idle()
                if verbosity:
                    self.stdout.write(f"Fired {fired} schedule(s).")
                fail_if_stood_by(scheduler)
                if relay is not None:
                    delivered = relay.run_until_idle()
                    if verbosity:
                        self.stdout.write(f"Delivered {delivered} message(s).")
                    fail_if_stood_by(relay)
            elif relay is None:
                scheduler.run(max_iterations=max_iterations)
            else:
                with relay_thread(relay):
                    scheduler.run(max_iterations=max_iterations)

    def _make_days(self, using: str, verbosity: int) -> None:
        """A one-off run makes the days ahead first, as a leader's history thread does (a
        cron of ``--once`` runs has no such thread), so its fires land in their day's
        partition. Not having a lock in time, or any database error here, is a warning:
        the fires go on (into the default partition for a day not made)."""
        try:
            made = make_ahead(using=using)
        except DatabaseError as exc:
            self.stderr.write(
                self.style.WARNING(f"Could not make the days ahead ({first_line(exc)}).")
            )
            return
        days = ", ".join(day.isoformat() for day in made.made)
        if verbosity and made.made:
            self.stdout.write(f"Made the partitions of {days}.")
        if made.skipped:
            skipped = ", ".join(day.isoformat() for day in made.skipped)
            self.stderr.write(
                self.style.WARNING(
                    f"Could not make the partitions of {skipped} yet (a lock); the next run "
                    "makes them."
                )
            )
