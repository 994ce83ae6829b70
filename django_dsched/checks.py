"""System checks. IDs are stable and documented in docs/reference.md."""

from __future__ import annotations

import difflib
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections
from django.urls import URLResolver, get_resolver

from django_dsched.conf import PREFIX, AppSettings, app_settings
from django_dsched.exceptions import ConfigurationError, ValidationError


@register(Tags.database, Tags.compatibility)
def check_database(**kwargs: Any) -> list[Error]:
    alias = app_settings.DATABASE
    if alias not in connections.settings:
        return [
            Error(
                f"DSCHED_DATABASE names the database alias {alias!r}, which is not in DATABASES.",
                id="dsched.E001",
            )
        ]
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return [
            Error(
                f"django-dsched needs PostgreSQL; the database {alias!r} is {vendor}.",
                hint=(
                    "Leader election and firing rely on SELECT ... FOR UPDATE SKIP LOCKED, "
                    "advisory locks and LISTEN/NOTIFY, which SQLite and the other backends "
                    "lack. Point DSCHED_DATABASE at a PostgreSQL database."
                ),
                id="dsched.E002",
            )
        ]
    return []


@register(Tags.compatibility)
def check_settings(**kwargs: Any) -> list[Error]:
    errors = []
    if not settings.USE_TZ:
        errors.append(
            Error(
                "django-dsched needs USE_TZ = True: schedule times are instants.",
                id="dsched.E003",
            )
        )
    lease, heartbeat = app_settings.LEASE_SECONDS, app_settings.HEARTBEAT_SECONDS
    if not (isinstance(heartbeat, int | float) and heartbeat > 0 and lease >= 2 * heartbeat):
        errors.append(
            Error(
                f"DSCHED_LEASE_SECONDS ({lease}) must be at least twice "
                f"DSCHED_HEARTBEAT_SECONDS ({heartbeat}), and both positive.",
                hint="A leader renews its lease every heartbeat; two missed beats end it.",
                id="dsched.E004",
            )
        )
    for name in ("POLL_INTERVAL", "STANDBY_INTERVAL"):
        value = getattr(app_settings, name)
        if not (_is_number(value) and 0 < value < float("inf")):
            errors.append(Error(f"DSCHED_{name} must be a positive number.", id="dsched.E005"))
    batch = app_settings.BATCH_SIZE
    if not (isinstance(batch, int) and 1 <= batch <= 10_000):
        errors.append(
            Error("DSCHED_BATCH_SIZE must be a whole number from 1 to 10000.", id="dsched.E006")
        )
    errors.extend(_bucket_setting_errors())
    return errors


@register(Tags.compatibility)
def check_declared_schedules(**kwargs: Any) -> list[Warning]:
    """Each schedule declared in code (``DSCHED_SCHEDULES``, ``@periodic``) is one the sync
    would accept (dsched.W006). A warning: a bad declaration stops the sync (``migrate``,
    ``dsched sync``) with its reason, never the scheduler or the relay, which fire what is
    in the database."""
    from django_dsched.declared import declarations, problem

    def warning(what: str) -> Warning:
        hint = "Fix it in DSCHED_SCHEDULES or in its @periodic declaration."
        return Warning(what, hint=hint, id="dsched.W006")

    try:
        declared = declarations()
    except ValidationError as exc:  # DSCHED_SCHEDULES is not a dict
        return [warning(exc.messages[0])]
    except ConfigurationError as exc:  # @periodic refused a declaration while imported
        return [warning(f"declared schedules: {exc}")]
    found = []
    for name, spec in sorted(declared.items(), key=lambda item: str(item[0])):
        try:
            why = problem(name, spec)
        except Exception as exc:  # a check never raises: what the sync would meet too
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            found.append(warning(f"declared schedule {name!r}: {why}"))
    return found


@register(Tags.compatibility)
def check_unknown_settings(**kwargs: Any) -> list[Warning]:
    """A ``DSCHED_*`` setting the package does not read is most likely a misspelt one."""
    known = {setting.setting_name for setting in AppSettings.all()}
    shortened = {setting.name for setting in AppSettings.all()}  # the prefix would match
    warnings = []
    for name in sorted(dir(settings)):
        if not name.startswith(PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name.removeprefix(PREFIX), sorted(shortened), n=1)
        warnings.append(
            Warning(
                f"{name} is not a django-dsched setting: it is ignored.",
                hint=f"Did you mean {PREFIX}{close[0]}?"
                if close
                else "The settings are listed in the reference (docs/reference.md).",
                id="dsched.W005",
            )
        )
    return warnings


def _bucket_setting_errors() -> list[Error]:
    from django_dsched.cluster.buckets import LOCK_STRIDE, MAX_BUCKETS, is_valid_count

    errors = []
    count, replicas = app_settings.BUCKETS, app_settings.REPLICAS
    if not is_valid_count(count):
        errors.append(
            Error(
                f"DSCHED_BUCKETS ({count!r}) must be a power of two from 1 to {MAX_BUCKETS}.",
                hint="Every instance of a cluster must use the same count.",
                id="dsched.E020",
            )
        )
    if not (isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 1):
        errors.append(
            Error("DSCHED_REPLICAS must be a whole number, at least 1.", id="dsched.E021")
        )
    lease_id = app_settings.LEASE_ID
    if not (isinstance(lease_id, int) and 0 <= lease_id < LOCK_STRIDE):
        errors.append(
            Error(
                f"DSCHED_LEASE_ID ({lease_id!r}) must be a whole number from 0 to "
                f"{LOCK_STRIDE - 1}.",
                hint="Bucket b's lease row is DSCHED_LEASE_ID + b * 65536.",
                id="dsched.E022",
            )
        )
    return errors


@register(Tags.database)
def check_bucket_count(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: DSCHED_BUCKETS agrees with the count the cluster in the database
    runs with (a live cluster with another count refuses this instance)."""
    from django.db import DatabaseError

    from django_dsched.cluster.buckets import is_valid_count
    from django_dsched.cluster.lease import LIVE_LEASES, stored_bucket_count

    alias = app_settings.DATABASE
    if not databases or alias not in databases or not is_valid_count(app_settings.BUCKETS):
        return []
    try:
        stored = stored_bucket_count(alias, app_settings.LEASE_ID)
        if stored is None or stored == app_settings.BUCKETS:
            return []
        with connections[alias].cursor() as cursor:
            cursor.execute(
                LIVE_LEASES,
                {
                    "base": app_settings.LEASE_ID,
                    "stride": 1 << 16,
                    "lease": float(app_settings.LEASE_SECONDS),
                },
            )
            (live,) = cursor.fetchone()
    except DatabaseError:
        return []  # not migrated yet, or unreachable: other checks say so
    hint = (
        "Every instance of a cluster must use the same DSCHED_BUCKETS. To change it, stop "
        "every scheduler, wait one lease, then start them all with the new count."
    )
    if live:
        return [
            Error(
                f"DSCHED_BUCKETS is {app_settings.BUCKETS} but the running cluster in the "
                f"database uses {stored} bucket(s): run_scheduler would refuse to start.",
                hint=hint,
                id="dsched.E023",
            )
        ]
    return [
        Warning(
            f"DSCHED_BUCKETS is {app_settings.BUCKETS} but the cluster in the database last "
            f"ran with {stored} bucket(s); the next run_scheduler will switch it (no "
            "scheduler is running now).",
            hint=hint,
            id="dsched.W020",
        )
    ]


# The primary's standbys by mode, as this session sees them (sync_state is NULL in every row
# for a role without pg_read_all_stats), and whether this session's commits wait for a
# synchronous standby at all.
REPLICATION = """
SELECT pg_is_in_recovery(), count(*),
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
       count(*) FILTER (WHERE sync_state IS NULL),
       current_setting('synchronous_commit')
FROM pg_stat_replication
"""


def replication_messages(
    in_recovery: bool, standbys: int, synchronous: int, unknown: int, synchronous_commit: str
) -> list[CheckMessage]:
    """What the standbys of the database promise across a failover (docs/high-availability.md)."""
    guide = "See docs/high-availability.md."
    if in_recovery or standbys == 0:
        return []  # a standby reports nothing; a lone server has no failover to warn about
    if unknown == standbys:
        return [
            Warning(
                f"The primary has {standbys} standby(s), and this role cannot see whether they "
                "replicate synchronously (pg_stat_replication shows sync_state only to roles "
                "with pg_read_all_stats).",
                hint="GRANT pg_read_all_stats to the role that runs the check. " + guide,
                id="dsched.W032",
            )
        ]
    if synchronous == 0:
        return [
            Warning(
                f"The primary has {standbys} asynchronous standby(s) and no synchronous one: "
                "a failover to one of them loses what the primary committed and had not sent "
                "yet. Fires are then at least once, not exactly once: a lost slot fires again "
                "on the new primary with the same event id (consumers dedupe on it), or, "
                "under COALESCE, counts as missed when a later slot is due as well.",
                hint="For exactly once across a failover make the standby synchronous "
                "(Patroni: synchronous_mode: true; else synchronous_standby_names). " + guide,
                id="dsched.W030",
            )
        ]
    if synchronous_commit in ("local", "off"):
        return [
            Warning(
                f"synchronous_commit is {synchronous_commit!r} for this database role: "
                "commits do not wait for the synchronous standby, so a failover can lose "
                "acknowledged fires as with an asynchronous one.",
                hint="Use synchronous_commit = on (the default), remote_write or "
                "remote_apply for the scheduler's role. " + guide,
                id="dsched.W031",
            )
        ]
    return []


@register(Tags.database)
def check_replication(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: warn when a failover could lose fires (asynchronous standbys
    only, or commits that do not wait for the synchronous one)."""
    from django.db import DatabaseError

    alias = app_settings.DATABASE
    if not databases or alias not in databases:
        return []
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(REPLICATION)
            row = cursor.fetchone()
    except DatabaseError:
        return []  # unreachable: other checks say so
    return replication_messages(*row)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@register(Tags.compatibility)
def check_delivery_settings(**kwargs: Any) -> list[Error]:
    """The relay's and retention's settings (dsched.E007 to E013)."""
    from django_dsched.outbox.transports.registry import routing_problems

    errors = [
        Error(f"{problem}.", id="dsched.E007")
        for problem in routing_problems(app_settings.TRANSPORTS, app_settings.TRANSPORTS_BY_HOST)
    ]
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
    timings = {
        name: getattr(app_settings, name)
        for name in (
            "RELAY_POLL_INTERVAL",
            "RELAY_VISIBILITY_TIMEOUT",
            "RELAY_RETRY_BASE",
            "RELAY_RETRY_MAX",
        )
    }
    bad = [name for name, value in timings.items() if not (_is_number(value) and value > 0)]
    errors.extend(
        Error(f"DSCHED_{name} must be a positive number of seconds.", id="dsched.E010")
        for name in bad
    )
    heartbeat = app_settings.RELAY_HEARTBEAT_INTERVAL
    not_positive = [
        name
        for name in ("RELAY_HEARTBEAT_INTERVAL", "RELAY_MAX_RUN_SECONDS")
        if (value := getattr(app_settings, name)) is not None
        and not (_is_number(value) and value > 0)
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
    days, rows = app_settings.RETENTION_DAYS, app_settings.RETENTION_BATCH_SIZE
    interval = app_settings.RETENTION_INTERVAL
    if days is not None and not (_is_number(days) and days > 0):
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
    if not (_is_number(interval) and interval > 0):
        errors.append(
            Error(
                "DSCHED_RETENTION_INTERVAL must be a positive number of seconds.", id="dsched.E011"
            )
        )
    allowed = app_settings.WEBHOOK_ALLOWED_HOSTS
    if isinstance(allowed, str) or not all(isinstance(h, str) and h for h in allowed):
        errors.append(
            Error(
                "DSCHED_WEBHOOK_ALLOWED_HOSTS must be a list of host names.",
                hint='For example ["hooks.example.com", ".internal.example.com:8443"].',
                id="dsched.E012",
            )
        )
    errors.extend(_webhook_network_errors())
    modules = app_settings.HANDLER_MODULES
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        errors.append(
            Error("DSCHED_HANDLER_MODULES must be a list of module names.", id="dsched.E013")
        )
    return errors


@register(Tags.compatibility, Tags.database)
def check_prepared_creates(**kwargs: Any) -> list[CheckMessage]:
    """DSCHED_PREPARE_CREATES with a database entry set up for a transaction pooler
    (DISABLE_SERVER_SIDE_CURSORS, docs/pgbouncer.md): PgBouncer < 1.21 cannot carry a
    prepared statement from one transaction to the next, and 1.21 passes on to the server
    the DEALLOCATE ALL psycopg sends after a rollback (dsched.W002)."""
    entry = connections.settings.get(app_settings.DATABASE, {})
    if not app_settings.PREPARE_CREATES or not entry.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Warning(
            "DSCHED_PREPARE_CREATES is on, and the database entry looks like it goes through "
            "a transaction pooler (DISABLE_SERVER_SIDE_CURSORS).",
            hint=(
                "Behind PgBouncer older than 1.22, or without max_prepared_statements, "
                "prepared statements fail with 'prepared statement does not exist': turn "
                "DSCHED_PREPARE_CREATES off (docs/pgbouncer.md)."
            ),
            id="dsched.W002",
        )
    ]


def _webhook_network_errors() -> list[Error]:
    """DSCHED_WEBHOOK_ALLOWED_NETWORKS and DSCHED_WEBHOOK_RESOLVER (dsched.E012)."""
    from django_dsched.outbox.transports.webhook import allowed_networks, configured_resolver

    errors = []
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


# A zone every tzdata release has had: if it cannot be read, this host has no tzdata.
PROBE_ZONE = "America/New_York"


@register(Tags.compatibility)
def check_time_zones(**kwargs: Any) -> list[Error]:
    """dsched.E014: this host can read IANA time zones.

    A scheduler that cannot read a schedule's zone sets the schedule aside (the row is
    taken for bad data); on a host with no tzdata at all that would be every schedule in a
    zone, so such a host is refused at start instead.
    """
    try:
        ZoneInfo(PROBE_ZONE)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return [
            Error(
                f"This host cannot read the IANA time zone {PROBE_ZONE!r}: it has no tzdata.",
                hint="Install the system's tzdata package, or the tzdata package from PyPI.",
                id="dsched.E014",
            )
        ]
    return []


@register(Tags.database)
def check_unserved_topics(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Topics and event types of schedules that no transport or handler would deliver
    (dsched.W003; ``check --database``, and ``run_relay`` logs them at start)."""
    if not databases or app_settings.DATABASE not in databases:
        return []
    from django_dsched.outbox.coverage import unserved

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


def _serves_rest(patterns: Any) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            name = pattern.urlconf_name
            if getattr(name, "__name__", name) == "django_dsched.rest.urls":
                return True
            if _serves_rest(pattern.url_patterns):
                return True
    return False


@register(Tags.urls)
def check_rest_apps(**kwargs: Any) -> list[CheckMessage]:
    """The URLconf includes the REST API (django_dsched.rest.urls) but the apps it needs are
    not installed (dsched.E015, dsched.W004)."""
    try:
        served = _serves_rest(get_resolver().url_patterns)
    except Exception:  # a broken URLconf is Django's own check to report
        return []
    if not served:
        return []
    messages: list[CheckMessage] = []
    if not apps.is_installed("rest_framework"):
        messages.append(
            Error(
                "The URLconf includes django_dsched.rest.urls, but rest_framework is not in "
                "INSTALLED_APPS.",
                hint='Add "rest_framework" (and "rest_framework.authtoken" for API tokens) '
                "to INSTALLED_APPS (docs/api.md).",
                id="dsched.E015",
            )
        )
    if not apps.is_installed("rest_framework.authtoken"):
        messages.append(
            Warning(
                "The URLconf includes django_dsched.rest.urls, but rest_framework.authtoken "
                "is not in INSTALLED_APPS: services cannot use API tokens, and a request "
                "without credentials is answered 403, not 401.",
                hint='Add "rest_framework.authtoken" to INSTALLED_APPS and migrate, or '
                "ignore this warning if only logged-in browser sessions use the API "
                "(SILENCED_SYSTEM_CHECKS).",
                id="dsched.W004",
            )
        )
    return messages


@register(Tags.database)
def check_history_partitions(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: every partition of ``event_store_t`` has the exactly-once index,
    a unique ``(aggregate_id, scheduled_ts)`` index (dsched.W040; docs/history-partitions.md).
    A partition made by hand or by another tool may lack it, and then the database no longer
    refuses a second event for a (schedule, slot) in it."""
    from django_dsched.history.partitions import without_one_per_slot

    alias = app_settings.DATABASE
    if not databases or alias not in databases or connections[alias].vendor != "postgresql":
        return []
    try:
        found = without_one_per_slot(alias)
    except DatabaseError:
        return []  # unreachable: other checks say so
    messages: list[CheckMessage] = []
    for part in found:
        make = f"create it: {part.create_sql()};"
        if part.suffix is None:
            hint = "It holds no single UTC day, so django-dsched does not make its index: " + make
        else:
            hint = (
                "The leader makes it within DSCHED_RETENTION_INTERVAL; to make it now, run "
                "`manage.py purge_history` (it logs an error if it cannot: two events of one "
                "slot in it); or " + make
            )
        # A warning, not an error: ``migrate`` runs the database checks and would refuse to
        # run, though the leader's next pass makes the index by itself.
        messages.append(
            Warning(
                f"The partition {part.name} of event_store_t has no unique index on "
                "(aggregate_id, scheduled_ts): the database does not refuse a second event "
                "for a (schedule, slot) in it.",
                hint=hint + " See docs/history-partitions.md.",
                id="dsched.W040",
            )
        )
    return messages
