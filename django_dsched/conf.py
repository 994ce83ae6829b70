"""The app's settings: one typed attribute per ``DSCHED_*`` setting, with its default.

Read them through :data:`app_settings` (``app_settings.BATCH_SIZE``). A value is read from
``django.conf.settings`` on first use and kept until a ``DSCHED_*`` setting changes
(``setting_changed``: ``override_settings`` reaches every caller), and nothing is read at
import time. A setting's default and its documentation live here and
nowhere else; docs/reference.md lists them all (a test keeps the two in step).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

T = TypeVar("T")

PREFIX = "DSCHED_"


class Setting(Generic[T]):
    """A ``DSCHED_<NAME>`` setting with its default (descriptor on :class:`AppSettings`)."""

    def __init__(self, default: T, doc: str, *, shown: str | None = None) -> None:
        self.default = default
        self.doc = doc
        self.shown = repr(default) if shown is None else shown  # how the docs write it
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def setting_name(self) -> str:
        return PREFIX + self.name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> T | Setting[T]:
        if instance is None:
            return self
        try:
            cached: T = _values[self.name]
            return cached
        except KeyError:
            pass
        value: T = getattr(settings, self.setting_name, self.default)
        _values[self.name] = value
        return value


# The settings read so far, by name; emptied whenever a DSCHED_* setting changes
# (override_settings and pytest-django's ``settings`` send ``setting_changed``). A read of
# an unset setting costs an AttributeError inside django.conf.settings: bulk creates read
# a few settings per item.
_values: dict[str, Any] = {}


@receiver(setting_changed)
def _forget_values(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(PREFIX):
        _values.clear()


class AppSettings:
    """Every ``DSCHED_*`` setting. The project sets ``DSCHED_<NAME>``; code reads ``<NAME>``."""

    # -- the scheduler -----------------------------------------------------------------------
    DATABASE = Setting("default", "Database alias that holds the scheduler's tables.")
    LEASE_SECONDS = Setting(5.0, "Seconds a leader's lease lasts without a heartbeat.")
    HEARTBEAT_SECONDS = Setting(
        1.0, "Seconds between a leader's heartbeats (at most half the lease)."
    )
    POLL_INTERVAL = Setting(
        2.0,
        "Longest sleep of an idle leader, in seconds, at most 15 (it also wakes when due, and on "
        "the NOTIFY of a write that makes a schedule due within 30 s). "
        "Also the backlog window of the COALESCE and SKIP misfire policies (at least 1 s): a "
        "slot due for less than this fires in a round of its own, never coalesced "
        "(docs/design.md, Misfires).",
    )
    STANDBY_INTERVAL = Setting(0.5, "How often a standby checks whether the leader is gone (s).")
    BATCH_SIZE = Setting(1000, "Schedules fired per transaction.")
    FAST_FAILOVER = Setting(
        True,
        "Take over as soon as the leader's database session is gone (its backend pid left "
        "pg_stat_activity), not only when its lease expires. A leader whose connection goes "
        "through a pooler (detected, docs/pgbouncer.md) never offers its pid: failover waits "
        "for the lease there.",
    )
    LISTEN: Setting[bool | None] = Setting(
        None,
        "LISTEN for NOTIFY wake-ups (new or edited schedules, fires for relays). None: yes, "
        "unless the connection goes through a pooler (detected), where the loops poll instead "
        "(DSCHED_POLL_INTERVAL, DSCHED_RELAY_POLL_INTERVAL). False: always poll; True: LISTEN "
        "even through a pooler (only a session-mode pooler can carry it).",
    )
    CONNECTION_OPTIONS: Setting[dict[str, Any]] = Setting(
        {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 4,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": 7000,
        },
        "libpq options run_scheduler and run_relay add to the OPTIONS of DSCHED_DATABASE's "
        "entry (an option the entry sets itself wins; None drops one): each attempt to reach "
        "a host gives up after connect_timeout seconds, and a server that vanished without "
        "closing the connection (a dead host, a cut network) is noticed in about 7 s "
        "(keepalive probes on an idle connection; tcp_user_timeout, in ms, for data sent and "
        "not acknowledged) instead of the kernel's minutes (docs/high-availability.md).",
    )
    RECONNECT_MAX_SECONDS = Setting(
        2.0,
        "Longest wait between two attempts of run_scheduler and run_relay to reach the "
        "database, at start and after losing it (the waits double from 0.1 s up to this, "
        "jittered), so a promoted standby is reached within it.",
    )
    LEASE_ID = Setting(
        1, "Row of the lease in scheduler_lock_t; two clusters on one database use two ids."
    )
    BUCKETS = Setting(
        1,
        "Buckets the schedules are split into, each fired by one instance at a time (a power "
        "of two, 1 to 32768; 1: one leader fires everything). The same on every instance; "
        "change it only with every scheduler stopped (docs/reference.md, Buckets).",
    )
    REPLICAS = Setting(
        2,
        "Instances ranked for each bucket by rendezvous hashing: its owner and its standbys "
        "(2: one standby ready to take the bucket over at once).",
    )
    # -- schedules ---------------------------------------------------------------------------
    DEFAULT_HOST_ID = Setting(
        uuid.UUID(int=0),
        "host_id (tenant) given to schedules created without one.",
        shown="UUID(int=0)",
    )
    EVENT_DATA_MAX_BYTES = Setting(
        64 * 1024, "Largest event_data accepted, in bytes of compact JSON."
    )
    EVENT_DATA_MAX_DEPTH = Setting(32, "Deepest nesting of event_data accepted.")
    BULK_MAX_ITEMS = Setting(
        10_000,
        "Most items one api.bulk_create or api.bulk_cancel call takes; a larger call is "
        "refused before anything is written.",
    )
    PREPARE_CREATES: Setting[bool | None] = Setting(
        None,
        "Single creates (api.create_*, the admin's and REST's create) send their statement as "
        "a server-side prepared statement (psycopg's prepare=True: the server parses and plans "
        "it once per session, about half its work per create, docs/performance.md). None: "
        "from a session's second create on, unless the session goes through a pooler "
        "(detected once per session). True: always, also through a pooler, which must then be "
        "PgBouncer >= 1.22 with max_prepared_statements > 0 (an older one in transaction mode "
        "cannot carry prepared statements, and 1.21 passes on the DEALLOCATE ALL psycopg sends "
        "after every rollback, docs/pgbouncer.md). False: never.",
    )
    MISFIRE_GRACE_SECONDS = Setting(
        60, "Grace of schedules with the SKIP misfire policy and no grace of their own (s)."
    )
    # -- overlap policies (docs/overlap.md) ---------------------------------------------------
    OVERLAP_BUFFER_LIMIT = Setting(
        1000,
        "Most slots a BUFFER_ALL schedule keeps waiting for its previous run to end; when more "
        "came due, the oldest are skipped (counted in skip_count).",
    )
    OVERLAP_WORKER_TIMEOUT = Setting(
        3600.0,
        "Seconds a run handed to workers (Celery, Django Tasks) counts as still going for the "
        "overlap policies, from its hand-off or its worker's start report, when no end is "
        "reported: a worker that died blocks its schedule no longer. A run the relay itself "
        "runs counts while its claim is live (DSCHED_RELAY_VISIBILITY_TIMEOUT, renewed while "
        "it runs).",
    )
    # -- quotas per tenant (docs/design.md, Quotas) --------------------------------------------
    DEFAULT_MAX_ACTIVE_SCHEDULES: Setting[int | None] = Setting(
        None,
        "Most schedules a host (tenant) may have that can still fire (active, paused or set "
        "aside), for hosts without a row in tenant_quota_t (the admin's tenant quotas): "
        "DSCHED_DEFAULT_HOST_ID, and others until their first create gives them one "
        "(DSCHED_TENANT_MAX_ACTIVE_SCHEDULES); a create past it is refused. None: no limit.",
    )
    DEFAULT_MAX_FIRES_PER_SECOND: Setting[float | None] = Setting(
        None,
        "Most fires per second the scheduler gives a host without a row in tenant_quota_t "
        "(DSCHED_DEFAULT_HOST_ID, or a host whose schedules were not made through "
        "django-dsched's creates), over every instance (each takes the share of its buckets); "
        "fires over it wait for a later batch, none is dropped. None: no limit.",
    )
    TENANT_MAX_ACTIVE_SCHEDULES: Setting[int | None] = Setting(
        10_000,
        "Most live schedules of a new tenant: a host other than DSCHED_DEFAULT_HOST_ID that "
        "has no row in tenant_quota_t is given one, with this limit and "
        "DSCHED_TENANT_MAX_FIRES_PER_SECOND, by the create that makes its first schedule "
        "(in that create's transaction). Change a tenant's limits on its row (the admin's "
        "tenant quotas); DSCHED_DEFAULT_HOST_ID, the operator's own host, is never given one. "
        "None, with DSCHED_TENANT_MAX_FIRES_PER_SECOND None too: no row is written.",
    )
    TENANT_MAX_FIRES_PER_SECOND: Setting[float | None] = Setting(
        100.0,
        "Most fires per second of a new tenant, written in its row with "
        "DSCHED_TENANT_MAX_ACTIVE_SCHEDULES (which see): over it, the tenant's fires wait, "
        "none is dropped. None: the row says no limit.",
    )
    QUOTA_CACHE_SECONDS = Setting(
        5.0,
        "Seconds a process remembers that a host has no quota of live schedules, sparing "
        "its creates a read of tenant_quota_t; a quota given to such a host (a new row, or a "
        "default set) applies to that process's creates within this time. A host with a "
        "quota is checked against the stored row on every create.",
    )
    SCHEDULES: Setting[Mapping[str, Mapping[str, Any]]] = Setting(
        {},
        "Schedules declared in settings, synced by `dsched sync` and after migrate: "
        '{name: {"cron": ..., "time_zone": ...} or {"every": n, "unit": ...} '
        '(the unit MINUTES unless given) or {"at": ...}, '
        'plus "topic", "event_type" and optional "data", "host_id", "priority", ...}.',
    )
    SYNC_ON_MIGRATE = Setting(True, "Sync declared schedules at the end of every migrate.")
    # -- delivery (the outbox relay, docs/delivery.md) ---------------------------------------
    TRANSPORTS: Setting[Mapping[str, Mapping[str, Any]]] = Setting(
        {"*": {"BACKEND": "handlers"}},
        'Where each topic\'s messages go: {topic or glob: {"BACKEND": ..., "OPTIONS": {...}, '
        '"HOSTS": [...]}}. BACKEND is an alias ("handlers", "tasks", "redis", "rabbitmq", '
        '"webhook", "celery", "sqs") or the dotted path of a Transport subclass; "*" catches the '
        'topics no other key matches. HOSTS: the hosts (tenants) an entry serves, host ids or "*" '
        "(every host); without it, DSCHED_DEFAULT_HOST_ID alone. A host's message whose entry "
        "does not serve it is refused (docs/delivery.md, Tenants).",
    )
    TRANSPORTS_BY_HOST: Setting[Mapping[str, Mapping[str, Mapping[str, Any]]]] = Setting(
        {},
        "Routes of particular hosts (tenants): {host_id: {topic or glob: entry}}, each table "
        "shaped like DSCHED_TRANSPORTS (no HOSTS: it serves its host). A message's host table is "
        'searched first (exact topic, longest pattern, "*"), then DSCHED_TRANSPORTS.',
    )
    HANDLER_MODULES: Setting[Sequence[str]] = Setting(
        [],
        "Modules a relay imports at start so their @handler registrations exist (besides "
        "every installed app's dsched_handlers module).",
    )
    RELAY_BATCH_SIZE = Setting(
        1000,
        "Most messages one relay claims per round trip; it holds (claimed, being claimed or not "
        "recorded) three batches at most.",
    )
    # 8 MiB is 128 events of 64 KiB: a relay then stays well under 200 MB RSS whatever its
    # batch size (docs/performance.md).
    RELAY_BATCH_BYTES = Setting(
        8 * 1024 * 1024,
        "Most bytes of payload (JSON text) one claim holds: a batch ends before the message "
        "that would pass it, and always has at least one. Bounds a relay's memory.",
        shown="8 * 1024 * 1024",
    )
    RELAY_POLL_INTERVAL = Setting(
        2.0, "Longest sleep of an idle relay, in seconds (it also wakes on NOTIFY)."
    )
    RELAY_MAX_ATTEMPTS = Setting(10, "Attempts before a message is dead-lettered.")
    RELAY_VISIBILITY_TIMEOUT = Setting(
        60.0, "Seconds a claim lasts; a relay that dies holding messages frees them after this."
    )
    RELAY_HEARTBEAT_INTERVAL: Setting[float | None] = Setting(
        None,
        "Seconds between a relay's renewals of the claims it holds while a batch runs (from a "
        "thread of its own), so a handler longer than the visibility timeout keeps its claim; "
        "under half the visibility timeout. None: a quarter of it.",
    )
    RELAY_MAX_RUN_SECONDS: Setting[float | None] = Setting(
        None,
        "Longest a relay keeps renewing the claims of a send (an in-process handler, a "
        "webhook, a broker) that has not returned, in seconds; past it the relay gives that "
        "send's claims up (they expire and another relay delivers them again) and holds its "
        "destination back while it hangs. None: no limit (a hung handler holds its messages "
        "while its relay lives).",
    )
    RELAY_CONCURRENCY = Setting(
        32,
        "Most sends one relay has under way at once (its send threads): a slow destination "
        "holds at most its own limits of them, the others go on.",
    )
    RELAY_HOST_CONCURRENCY = Setting(
        16,
        "Most sends one relay has under way at once for one host (tenant), all its routes "
        "together; a route's CONCURRENCY bounds each (route, host).",
    )
    RELAY_CIRCUIT_FAILURES = Setting(
        5,
        "Sends to one destination (a route, for one host) that fail in a row (timeouts, "
        "refused connections, 5xx, a raising handler; not a permanent failure) before the "
        "relay holds it back for DSCHED_RELAY_CIRCUIT_SECONDS, keeping its messages and "
        "counting no attempt meanwhile. 0: never.",
    )
    RELAY_CIRCUIT_SECONDS = Setting(
        30.0,
        "How long a destination whose circuit opened is held back (s), doubling each time it "
        "opens again before it closes, up to DSCHED_RELAY_RETRY_MAX; then one send probes it.",
    )
    RELAY_RETRY_BASE = Setting(
        2.0,
        "Retry delay after failed attempt n: min(RETRY_MAX, RETRY_BASE * 2**(n-1)), "
        "jittered down to half of it (s).",
    )
    RELAY_RETRY_MAX = Setting(600.0, "Longest retry delay (s).")
    WEBHOOK_ALLOWED_HOSTS: Setting[Sequence[str]] = Setting(
        [], 'Hosts webhooks may be sent (or redirected) to: "host", "host:port" or ".domain".'
    )
    WEBHOOK_ALLOWED_NETWORKS: Setting[Sequence[str]] = Setting(
        [],
        'Networks ("10.1.0.0/16", "127.0.0.1/32") webhooks may connect to although they are '
        "loopback, private, link-local or otherwise special (refused by default; see "
        "docs/delivery.md, Security). Checked against every address a host resolves to.",
    )
    WEBHOOK_RESOLVER: Setting[Any] = Setting(
        None,
        "How webhooks resolve host names: None (the system resolver), or a callable or its "
        "dotted path taking (host, port) and returning IP address strings.",
    )
    # -- retention ---------------------------------------------------------------------------
    RETENTION_DAYS: Setting[float | None] = Setting(
        45,
        "Delivered outbox messages and events older than this many days are deleted (None: never).",
    )
    RETENTION_BATCH_SIZE = Setting(1000, "Rows deleted per transaction by retention.")
    RETENTION_INTERVAL = Setting(3600.0, "Seconds between two retention passes.")
    # -- the REST API (django_dsched.rest, docs/api.md) ---------------------------------------
    API_HOST_RESOLVER = Setting(
        "django_dsched.rest.tenancy.default_hosts",
        "Dotted path of a callable(request) returning the host_ids (tenants) the request may "
        "reach; the first is where a schedule created without host_id goes. The default "
        "gives DSCHED_DEFAULT_HOST_ID alone.",
    )
    API_AUTHENTICATION_CLASSES: Setting[Sequence[str] | None] = Setting(
        None,
        "Dotted paths of the REST framework authentication classes of the API. None: DRF's "
        "TokenAuthentication when rest_framework.authtoken is installed, then Django's "
        "session (with CSRF).",
    )
    API_MAX_BODY_BYTES = Setting(
        1024 * 1024, "Largest request body the API reads, in bytes; a larger one is a 413."
    )
    API_MAX_BULK_BODY_BYTES = Setting(
        8 * 1024 * 1024,
        "Largest body of the API's bulk endpoints (schedules/bulk/, schedules/bulk-cancel/), "
        "in bytes; a larger one is a 413. 10,000 one-shot reminders take about 2 MB.",
    )

    # -- the admin (docs/admin.md) ------------------------------------------------------------
    ADMIN_HOST_RESOLVER: Setting[str | None] = Setting(
        None,
        "Dotted path of a callable(request) returning the host_ids (tenants) a staff user "
        "may see and change in the admin, or None for every host; every list, filter, page, "
        "action and form of the dsched admin is limited to them (docs/admin.md, Staff "
        "limited to tenants). None (the default): every staff user sees every host.",
    )

    # -- observability (docs/observability.md) ------------------------------------------------
    HTTP_BIND = Setting(
        "127.0.0.1",
        "Address the --metrics-port and --health-port servers of run_scheduler and run_relay "
        "listen on ('0.0.0.0' in a container whose probes and scrapes come from outside).",
    )
    HEALTH_STALL_SECONDS = Setting(
        60.0,
        "/livez answers 503 once a loop has not gone round for this many seconds.",
    )
    HEALTH_DETAIL = Setting(
        False,
        "/readyz shows each reason in full: the hosts of the database URL and the database's "
        'error. False: only what is wrong ("not connected to the database"); the logs '
        "have the full reason either way.",
    )
    METRICS_LABEL_VALUES = Setting(
        100,
        "Distinct values of a label that data decides (a topic, a transport) one process "
        "gives a series of their own: the first ones seen; any other counts under '_other'. "
        "Bounds the series and the scrape whatever tenants name their topics (0: no topic "
        "names at all).",
    )
    METRICS_CACHE_SECONDS = Setting(
        5.0,
        "Seconds the database-wide gauges (backlogs, dead letters) are kept between two "
        "reads of the database.",
    )
    METRICS_TOKEN: Setting[str | None] = Setting(
        None,
        "Bearer token a scraper sends (Authorization: Bearer ...). When set, the --metrics-port "
        "/metrics of run_scheduler and run_relay answers it alone (else 401), and it opens "
        "the metrics view (django_dsched.metrics.urls). None: /metrics is open to whoever "
        "reaches the port, the view only to logged-in users who may view the cluster "
        "(view_schedulerinstance).",
    )

    # -- schedule health (docs/observability.md, Schedule health) ------------------------------
    HEALTH_GRACE_SECONDS = Setting(
        60,
        "How long past its run time a slot may stay unfired before its schedule is LATE, for "
        "schedules without a grace of their own (health_grace_seconds), in seconds.",
    )
    HEALTH_FAILURE_TOLERANCE = Setting(
        0,
        "Failed runs in a row (failed attempts, worker-reported failures, dead letters) a "
        "schedule without a tolerance of its own (failure_tolerance) has before it is FAILING "
        "(0: the first failure not followed by a success).",
    )
    HEALTH_MAX_RUNTIME_SECONDS = Setting(
        3600,
        "Longest a run may go on (started, neither completed nor failed) before its schedule "
        "is STUCK, for schedules without a maximum of their own (max_runtime_seconds).",
    )
    HEALTH_MONITORED_MAX = Setting(
        100,
        "Most schedules marked monitored that the metrics give series of their own (last "
        "success, next due, health): the first ones by id (time-ordered: the oldest first); "
        "the others are counted in dsched_monitored_schedules only. Bounds the series "
        "whatever tenants mark.",
    )

    @classmethod
    def all(cls) -> list[Setting[Any]]:
        """Every setting, in the order declared above."""
        return [value for value in vars(cls).values() if isinstance(value, Setting)]


app_settings = AppSettings()
