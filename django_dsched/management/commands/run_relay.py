from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_dsched.conf import app_settings
from django_dsched.management._arguments import instance_id, positive_float, positive_int, topic
from django_dsched.management._process import (
    add_endpoint_arguments,
    configure_logging,
    connection_options,
    endpoints,
    fail_if_stood_by,
    reach_database,
    require_metrics,
    stop_on_signals,
)
from django_dsched.metrics.relay import relay_metrics
from django_dsched.outbox.coverage import warn_unserved
from django_dsched.outbox.relay import Relay


class Command(BaseCommand):
    help = (
        "Run an outbox relay: deliver fired events to their transports (Django tasks, "
        "handlers, Redis, RabbitMQ, webhooks), with retries and dead letters. Run as many as "
        "you like, on any machines."
    )
    # Checked once the database is reached (reach_database), not before anything can wait.
    requires_migrations_checks = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--instance-id",
            type=instance_id,
            help="Name of this relay in claims and the logs (default: host:pid).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            help=f"Messages claimed per round trip (default: {app_settings.RELAY_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--batch-bytes",
            type=positive_int,
            help=(
                "Most bytes of payload claimed per round trip, at least one message "
                f"(default: {app_settings.RELAY_BATCH_BYTES})."
            ),
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            help=(
                "Most sends under way at once (send threads) "
                f"(default: {app_settings.RELAY_CONCURRENCY}, DSCHED_RELAY_CONCURRENCY)."
            ),
        )
        parser.add_argument(
            "--host-concurrency",
            type=positive_int,
            help=(
                "Most sends under way at once for one host (tenant) "
                f"(default: {app_settings.RELAY_HOST_CONCURRENCY}, "
                "DSCHED_RELAY_HOST_CONCURRENCY)."
            ),
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_float,
            help=(
                "Longest sleep, in seconds, between checks for pending messages "
                f"(default: {app_settings.RELAY_POLL_INTERVAL}); NOTIFY wakes it sooner."
            ),
        )
        parser.add_argument(
            "--topic",
            dest="topics",
            action="append",
            type=topic,
            help="Deliver only this topic (repeat for several; default: all topics).",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="Deliver what is claimable now, then exit (retries not yet due are left).",
        )
        parser.add_argument(
            "--max-iterations",
            type=positive_int,
            help="Stop after this many rounds of the loop (for tests and operators).",
        )
        add_endpoint_arguments(parser)

    def handle(
        self,
        *,
        verbosity: int,
        instance_id: str | None,
        batch_size: int | None,
        batch_bytes: int | None,
        concurrency: int | None,
        host_concurrency: int | None,
        poll_interval: float | None,
        topics: list[str] | None,
        once: bool,
        max_iterations: int | None,
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
        metrics = None
        if metrics_on:
            metrics = relay_metrics()
        warn_unserved()
        relay = Relay(
            instance_id=instance_id,
            batch_size=batch_size,
            batch_bytes=batch_bytes,
            concurrency=concurrency,
            host_concurrency=host_concurrency,
            poll_interval=poll_interval,
            topics=topics,
            metrics=metrics,
        )
        with (
            stop_on_signals(relay),
            endpoints([relay], metrics_port, health_port, database_metrics),
        ):
            if not reach_database(self, relay, once=once):
                relay.shutdown()
            elif once:
                delivered = relay.run_until_idle()
                if verbosity:
                    self.stdout.write(f"Delivered {delivered} message(s).")
                fail_if_stood_by(relay)
            else:
                relay.run(max_iterations=max_iterations)
