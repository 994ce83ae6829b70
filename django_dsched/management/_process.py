"""Process plumbing shared by the long-running commands: signals, logging, a relay thread,
the metrics and health endpoints."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError
from django_dsched.management._arguments import port
from django_dsched.metrics import require
from django_dsched.metrics.database import DatabaseCollector
from django_dsched.metrics.registry import serve
from django_dsched.outbox.relay import Relay
from django_dsched.runtime.connections import apply_connection_options, describe_failure
from django_dsched.runtime.health import Checked, HealthServer
from django_dsched.runtime.http import EndpointServer
from django_dsched.runtime.loops import DatabaseLoop, wait_for_database
from django_dsched.runtime.tables import MissingTables, require_tables

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Stoppable(Protocol):
    @property
    def stopping(self) -> threading.Event: ...

    def stop(self) -> None: ...


@contextmanager
def stop_on_signals(loop: Stoppable) -> Iterator[None]:
    """SIGTERM/SIGINT stop the loop gracefully; a second one exits at once."""
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: Any) -> None:
        if loop.stopping.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        loop.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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


def add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """--metrics-port, --health-port, --database-metrics (docs/observability.md)."""
    parser.add_argument(
        "--metrics-port",
        type=port,
        default=0,
        help=(
            "Serve Prometheus metrics at /metrics on this port (0: off, the default; needs "
            "django-dsched[metrics]). Listens on DSCHED_HTTP_BIND."
        ),
    )
    parser.add_argument(
        "--health-port",
        type=port,
        default=0,
        help=(
            "Serve /livez and /readyz on this port (0: off, the default). Listens on "
            "DSCHED_HTTP_BIND."
        ),
    )
    parser.add_argument(
        "--database-metrics",
        action="store_true",
        help=(
            "Also serve the database-wide gauges (backlogs, dead letters, set-aside "
            "schedules) at /metrics, read at scrape time (one process per cluster is enough)."
        ),
    )


def require_metrics(metrics_port: int, database_metrics: bool) -> bool:
    """Whether metrics are on; a clear error if asked for without prometheus_client."""
    if database_metrics and not metrics_port:
        raise CommandError("--database-metrics needs --metrics-port.")
    if not metrics_port:
        return False

    try:
        require()
    except ConfigurationError as exc:
        raise CommandError(str(exc)) from exc
    return True


@contextmanager
def endpoints(
    loops: Sequence[Checked], metrics_port: int, health_port: int, database_metrics: bool
) -> Iterator[None]:
    """Serve /metrics and the health endpoints (each when its port is not 0) while the
    block runs. The loops' metrics objects must exist already (they register the series)."""
    address = app_settings.HTTP_BIND
    logger = logging.getLogger("django_dsched")
    servers: list[EndpointServer | HealthServer] = []
    try:
        if metrics_port:
            if database_metrics:
                from prometheus_client import REGISTRY

                REGISTRY.register(DatabaseCollector(close_connection=True))
            try:
                servers.append(serve(metrics_port, address))
            except OSError as exc:
                where = f"{address}:{metrics_port}"
                raise CommandError(f"--metrics-port: cannot listen on {where}: {exc}") from exc
            logger.info(
                "serving metrics on http://%s:%d/metrics (%s)",
                address,
                metrics_port,
                "bearer token required" if app_settings.METRICS_TOKEN else "no authentication",
            )
        if health_port:
            try:
                server = HealthServer(
                    loops, health_port, address, float(app_settings.HEALTH_STALL_SECONDS)
                )
            except OSError as exc:
                where = f"{address}:{health_port}"
                raise CommandError(f"--health-port: cannot listen on {where}: {exc}") from exc
            servers.append(server.start())
            logger.info("serving /livez and /readyz on http://%s:%d", address, health_port)
        yield
    finally:
        for started in servers:
            started.stop()


def connection_options() -> None:
    """Give the database entry the libpq options for losing a server
    (``DSCHED_CONNECTION_OPTIONS`` beneath the entry's own), before anything connects."""
    applied = apply_connection_options(app_settings.DATABASE)
    logging.getLogger("django_dsched").debug(
        "database options: %s", " ".join(f"{k}={v}" for k, v in sorted(applied.items()))
    )


def fail_if_stood_by(loop: DatabaseLoop) -> None:
    """After a ``--once`` run: fail (exit 1, one line) if ``loop`` stood by for a split brain,
    so that whatever runs the command hears of it, not only the log."""
    split = loop.stood_by
    if split is not None:
        raise CommandError(
            f"{loop.kind} {loop.instance_id} stood by: two hosts of the database URL accept "
            f"writes: {split} (docs/high-availability.md)"
        )


def reach_database(command: BaseCommand, loop: DatabaseLoop, *, once: bool) -> bool:
    """Before the loop runs: reach the database (a long-running command waits for it with
    bounded backoff, a ``--once`` run fails in one line), then Django's check for
    unapplied migrations (the commands set ``requires_migrations_checks`` off: Django's own
    check runs before anything can wait, and a database that is down made it a traceback).
    False: stopped while waiting."""
    while True:
        if once:
            try:
                connections[loop.using].ensure_connection()
                require_tables(connections[loop.using])
            except MissingTables as exc:
                raise CommandError(str(exc)) from None
            except DatabaseError as exc:
                raise CommandError(f"cannot reach the database: {describe_failure(exc)}") from exc
        elif not wait_for_database(loop):
            return False
        try:
            command.check_migrations()
        except DatabaseError as exc:
            if once:
                raise CommandError(f"cannot reach the database: {describe_failure(exc)}") from exc
            # Lost again before the check ended (or the check's own database, Django's
            # default alias, is down): wait and try again.
            connections[loop.using].close()
            delay = loop._backoff.next()
            loop.note_outage(exc, delay)
            loop.waker.wait(delay, None)
            if loop.stopping.is_set():
                return False
            continue
        return True
