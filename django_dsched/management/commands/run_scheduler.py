from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_dsched.conf import app_settings
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= 10_000:
        raise argparse.ArgumentTypeError("must be from 1 to 10000")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 < number <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds")
    return number


def instance_id(value: str) -> str:
    if not value.strip() or len(value) > 255:
        raise argparse.ArgumentTypeError("must be 1 to 255 characters")
    return value


@contextmanager
def stop_on_signals(scheduler: Scheduler) -> Iterator[None]:
    """SIGTERM/SIGINT stop the loop gracefully; a second one exits at once."""
    previous: dict[int, Any] = {}

    def handle(signum: int, frame: Any) -> None:
        if scheduler.stopping.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        scheduler.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Command(BaseCommand):
    help = (
        "Run a scheduler instance. Run one on as many machines as you like: one leads and "
        "fires due schedules, the others stand by and take over if it stops."
    )
    requires_migrations_checks = True

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
            help="Take the lead if free, fire what is due now, release the lead and exit.",
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
        **options: Any,
    ) -> None:
        if once and max_iterations:
            raise CommandError("Use --once or --max-iterations, not both.")
        configure_logging(verbosity)
        scheduler = Scheduler(
            instance_id=instance_id, batch_size=batch_size, poll_interval=poll_interval
        )
        relay = Relay(instance_id=f"{scheduler.instance_id}/relay") if with_relay else None
        with stop_on_signals(scheduler):
            if once:
                fired = scheduler.run_until_idle()
                if verbosity:
                    self.stdout.write(f"Fired {fired} schedule(s).")
                if relay is not None:
                    delivered = relay.run_until_idle()
                    if verbosity:
                        self.stdout.write(f"Delivered {delivered} message(s).")
            elif relay is None:
                scheduler.run(max_iterations=max_iterations)
            else:
                with relay_thread(relay):
                    scheduler.run(max_iterations=max_iterations)


@contextmanager
def relay_thread(relay: Relay) -> Iterator[None]:
    """Run ``relay`` on a thread (its own database connection) while the block runs."""

    def run() -> None:
        try:
            relay.run()
        except Exception:
            logging.getLogger("django_dsched.outbox.relay").exception(
                "the in-process relay crashed"
            )

    thread = threading.Thread(target=run, name="dsched-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        relay.stop()
        thread.join(app_settings.RELAY_VISIBILITY_TIMEOUT)


def configure_logging(verbosity: int) -> None:
    """Map --verbosity onto the package logger; add a handler only if none is configured."""
    logger = logging.getLogger("django_dsched")
    logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
