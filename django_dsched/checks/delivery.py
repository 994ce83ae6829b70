"""The relay's, retention's and transports' settings (dsched.E007 to E013), the routes'
grants to hosts (dsched.E050 to E052) and, with ``--database``, topics no transport or
handler would deliver (dsched.W003)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError

from django_dsched.checks.settings import is_number
from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError
from django_dsched.outbox.coverage import unserved
from django_dsched.outbox.transports.addresses import refusal, resolve
from django_dsched.outbox.transports.registry import routing_problems, tenancy_problems
from django_dsched.outbox.transports.webhook import allowed_networks, configured_resolver

# What to do about each tenancy problem (docs/delivery.md, "Tenants").
HINTS = {
    "dsched.E050": 'HOSTS is "*" or a list of host ids, on entries of DSCHED_TRANSPORTS only.',
    "dsched.E051": (
        "A route that serves tenants must keep them apart: a schedule of one host must not "
        "reach another's queue, stream or URL (docs/delivery.md, Tenants)."
    ),
    "dsched.E052": (
        'For example "ALLOWED_TASKS": ["reports.tasks.*"]; `dsched import-celery-beat` '
        "lists the tasks it imported."
    ),
}

# How long the check waits for this machine's resolver to name localhost's addresses.
LOCAL_LOOKUP_SECONDS = 1.0


@register(Tags.compatibility)
def check_delivery_settings(**kwargs: Any) -> list[Error]:
    """The relay's and retention's settings (dsched.E007 to E013)."""
    errors = [
        Error(f"{problem}.", id="dsched.E007")
        for problem in routing_problems(app_settings.TRANSPORTS, app_settings.TRANSPORTS_BY_HOST)
    ]
    errors.extend(
        Error(f"{problem}.", hint=HINTS[code], id=code)
        for code, problem in tenancy_problems(
            app_settings.TRANSPORTS, app_settings.TRANSPORTS_BY_HOST
        )
    )
    errors.extend(_relay_size_errors())
    errors.extend(_relay_timing_errors())
    errors.extend(_retention_errors())
    errors.extend(_webhook_errors())
    modules = app_settings.HANDLER_MODULES
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        errors.append(
            Error("DSCHED_HANDLER_MODULES must be a list of module names.", id="dsched.E013")
        )
    return errors


def _relay_size_errors() -> list[Error]:
    """How much the relay claims and how often it tries (dsched.E008, E009)."""
    errors = []
    batch, attempts = app_settings.RELAY_BATCH_SIZE, app_settings.RELAY_MAX_ATTEMPTS
    if not (isinstance(batch, int) and 1 <= batch <= 10_000):
        errors.append(
            Error(
                "DSCHED_RELAY_BATCH_SIZE must be a whole number from 1 to 10000.", id="dsched.E008"
            )
        )
    batch_bytes = app_settings.RELAY_BATCH_BYTES
    if not (isinstance(batch_bytes, int) and not isinstance(batch_bytes, bool) and batch_bytes > 0):
        errors.append(
            Error("DSCHED_RELAY_BATCH_BYTES must be a positive whole number.", id="dsched.E008")
        )
    if not (isinstance(attempts, int) and 1 <= attempts <= 1000):
        errors.append(
            Error(
                "DSCHED_RELAY_MAX_ATTEMPTS must be a whole number from 1 to 1000.", id="dsched.E009"
            )
        )
    return errors + _relay_limit_errors()


def _relay_limit_errors() -> list[Error]:
    """How many sends a relay runs at once, and when a destination is held back (E008, E009)."""
    errors = []
    for name, least in (("RELAY_CONCURRENCY", 1), ("RELAY_HOST_CONCURRENCY", 1)):
        value = getattr(app_settings, name)
        if not (isinstance(value, int) and not isinstance(value, bool) and least <= value <= 1024):
            errors.append(
                Error(f"DSCHED_{name} must be a whole number from 1 to 1024.", id="dsched.E008")
            )
    failures = app_settings.RELAY_CIRCUIT_FAILURES
    if not (isinstance(failures, int) and not isinstance(failures, bool) and 0 <= failures <= 1000):
        errors.append(
            Error(
                "DSCHED_RELAY_CIRCUIT_FAILURES must be a whole number from 0 (never hold a "
                "destination back) to 1000.",
                id="dsched.E009",
            )
        )
    return errors


# The longest relay timing accepted: a claim's expiry and a retry's time are timestamps the
# database keeps in range (0001 to 9999), so a timing of centuries would refuse every claim.
LONGEST_RELAY_TIMING = 365 * 24 * 3600


def _relay_timing_errors() -> list[Error]:
    """The relay's intervals, timeouts and retry delays (dsched.E010)."""
    timings = {
        name: getattr(app_settings, name)
        for name in (
            "RELAY_POLL_INTERVAL",
            "RELAY_VISIBILITY_TIMEOUT",
            "RELAY_RETRY_BASE",
            "RELAY_RETRY_MAX",
            "RELAY_CIRCUIT_SECONDS",
        )
    }
    bad = [
        name
        for name, value in timings.items()
        if not (is_number(value) and 0 < value <= LONGEST_RELAY_TIMING)
    ]
    errors = [
        Error(
            f"DSCHED_{name} must be a positive number of seconds, at most a year "
            f"({LONGEST_RELAY_TIMING:,}): a claim or a retry is a time the database stores.",
            id="dsched.E010",
        )
        for name in bad
    ]
    heartbeat = app_settings.RELAY_HEARTBEAT_INTERVAL
    not_positive = [
        name
        for name in ("RELAY_HEARTBEAT_INTERVAL", "RELAY_MAX_RUN_SECONDS")
        if (value := getattr(app_settings, name)) is not None
        and not (is_number(value) and value > 0)
    ]
    errors.extend(
        Error(f"DSCHED_{name} must be a positive number of seconds, or None.", id="dsched.E010")
        for name in not_positive
    )
    if (
        heartbeat is not None
        and "RELAY_HEARTBEAT_INTERVAL" not in not_positive
        and "RELAY_VISIBILITY_TIMEOUT" not in bad
        and heartbeat * 2 >= timings["RELAY_VISIBILITY_TIMEOUT"]
    ):
        errors.append(
            Error(
                "DSCHED_RELAY_HEARTBEAT_INTERVAL must be under half of "
                "DSCHED_RELAY_VISIBILITY_TIMEOUT (a claim must be renewed before it expires).",
                id="dsched.E010",
            )
        )
    if not bad and timings["RELAY_RETRY_BASE"] > timings["RELAY_RETRY_MAX"]:
        errors.append(
            Error(
                "DSCHED_RELAY_RETRY_BASE must not exceed DSCHED_RELAY_RETRY_MAX.",
                id="dsched.E010",
            )
        )
    return errors


def _retention_errors() -> list[Error]:
    """How long history is kept and how it is purged (dsched.E011)."""
    errors = []
    days, rows = app_settings.RETENTION_DAYS, app_settings.RETENTION_BATCH_SIZE
    interval = app_settings.RETENTION_INTERVAL
    if days is not None and not (is_number(days) and days > 0):
        errors.append(
            Error(
                "DSCHED_RETENTION_DAYS must be a positive number of days, or None to keep "
                "history forever.",
                id="dsched.E011",
            )
        )
    if not (isinstance(rows, int) and 1 <= rows <= 100_000):
        errors.append(
            Error(
                "DSCHED_RETENTION_BATCH_SIZE must be a whole number from 1 to 100000.",
                id="dsched.E011",
            )
        )
    if not (is_number(interval) and interval > 0):
        errors.append(
            Error(
                "DSCHED_RETENTION_INTERVAL must be a positive number of seconds.", id="dsched.E011"
            )
        )
    return errors


def _webhook_errors() -> list[Error]:
    """DSCHED_WEBHOOK_ALLOWED_HOSTS, DSCHED_WEBHOOK_ALLOWED_NETWORKS and
    DSCHED_WEBHOOK_RESOLVER (dsched.E012)."""
    errors = []
    allowed = app_settings.WEBHOOK_ALLOWED_HOSTS
    if isinstance(allowed, str) or not all(isinstance(h, str) and h for h in allowed):
        errors.append(
            Error(
                "DSCHED_WEBHOOK_ALLOWED_HOSTS must be a list of host names.",
                hint='For example ["hooks.example.com", ".internal.example.com:8443"].',
                id="dsched.E012",
            )
        )
    try:
        allowed_networks()
    except (TypeError, ValueError) as exc:
        errors.append(
            Error(
                f"DSCHED_WEBHOOK_ALLOWED_NETWORKS must be a list of networks: {exc}.",
                hint='For example ["10.20.0.0/16", "fd00:1234::/32"] (no host bits set).',
                id="dsched.E012",
            )
        )
    try:
        configured_resolver()
    except (ImportError, ConfigurationError) as exc:
        errors.append(
            Error(
                f"DSCHED_WEBHOOK_RESOLVER must be None, a callable or its dotted path: {exc}.",
                id="dsched.E012",
            )
        )
    return errors


@register(Tags.compatibility)
def check_local_webhook_hosts(**kwargs: Any) -> list[CheckMessage]:
    """An allowlisted ``localhost`` name that resolves to addresses some of which
    DSCHED_WEBHOOK_ALLOWED_NETWORKS refuses (dsched.W041): a name with one refused address
    is refused, so every webhook to it would be a dead letter. Only names of this machine
    (``localhost``, ``*.localhost``) are resolved here: no lookup leaves the host."""
    try:
        networks, resolver = allowed_networks(), configured_resolver()
    except (TypeError, ValueError, ImportError, ConfigurationError):
        return []  # dsched.E012 says why
    found: list[CheckMessage] = []
    for entry in app_settings.WEBHOOK_ALLOWED_HOSTS:
        host = entry.split(":")[0].lower().rstrip(".") if isinstance(entry, str) else ""
        if host != "localhost" and not host.endswith(".localhost"):
            continue
        try:
            resolved = resolve(host, 80, resolver, LOCAL_LOOKUP_SECONDS)
        except OSError:  # TimeoutError too: nothing to say about what cannot be resolved
            continue
        refused = [why for why in (refusal(a, networks) for a in resolved) if why is not None]
        if refused and len(refused) < len(resolved):
            found.append(
                Warning(
                    f"{host} resolves to {', '.join(map(str, resolved))} and "
                    f"{'; '.join(refused)}: every webhook to {host} would be refused "
                    "(a name with one refused address is refused).",
                    hint="Open every address it resolves to in "
                    'DSCHED_WEBHOOK_ALLOWED_NETWORKS (e.g. ["127.0.0.1/32"] opens both '
                    "loopbacks), or use the address in the URL.",
                    id="dsched.W041",
                )
            )
    return found


@register(Tags.database)
def check_unserved_topics(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Topics and event types of schedules that no transport or handler would deliver
    (dsched.W003; ``check --database``, and ``run_relay`` logs them at start)."""
    if not databases or app_settings.DATABASE not in databases:
        return []
    try:
        found = unserved()
    except DatabaseError:  # not migrated yet: dsched.E001 and migrate say what to do
        return []
    return [
        Warning(
            f"Schedules of host {item.host_id} use {item}.",
            hint=(
                "Their messages would fail and end as dead letters: route the topic in "
                "DSCHED_TRANSPORTS or register a handler (docs/delivery.md)."
            ),
            id="dsched.W003",
        )
        for item in found
    ]
