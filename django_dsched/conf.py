"""The app's settings, read lazily from ``django.conf.settings``.

Every setting is named ``DSCHED_<NAME>`` in the project's settings; its default lives here
and nowhere else. Read them through :data:`app_settings` so that ``override_settings``
reaches them.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Database alias that holds the scheduler's tables.
    "DATABASE": "default",
    # Seconds a leader's lease lasts without a heartbeat.
    "LEASE_SECONDS": 5.0,
    # Seconds between a leader's heartbeats (must be well under the lease).
    "HEARTBEAT_SECONDS": 1.0,
    # Longest sleep of an idle leader, in seconds (it also wakes on NOTIFY and when due).
    "POLL_INTERVAL": 2.0,
    # How often a standby checks whether the leader is gone, in seconds.
    "STANDBY_INTERVAL": 0.5,
    # Schedules fired in one transaction.
    "BATCH_SIZE": 1000,
    # Take over at once when the leader's database session ends (its backend pid leaves
    # pg_stat_activity) instead of waiting for the lease. A leader whose connection goes
    # through a pooler (detected, docs/pgbouncer.md) never offers its pid: failover waits
    # for the lease there.
    "FAST_FAILOVER": True,
    # LISTEN for NOTIFY wake-ups (new or edited schedules, fires for relays). None: yes,
    # unless the connection goes through a pooler (detected), where the loops poll instead
    # (DSCHED_POLL_INTERVAL, DSCHED_RELAY_POLL_INTERVAL). False: always poll; True: LISTEN
    # even through a pooler (only a session-mode pooler can carry it).
    "LISTEN": None,
    # Row id of the lease in scheduler_lock_t; two clusters on one database use two ids.
    "LEASE_ID": 1,
    # host_id given to schedules created without one.
    "DEFAULT_HOST_ID": uuid.UUID(int=0),
    # Largest event_data accepted, in bytes of compact JSON.
    "EVENT_DATA_MAX_BYTES": 64 * 1024,
    # Deepest nesting of event_data accepted.
    "EVENT_DATA_MAX_DEPTH": 32,
    # Grace of schedules with the SKIP misfire policy and no grace of their own, in seconds.
    "MISFIRE_GRACE_SECONDS": 60,
    # Schedules declared in settings, synced by `manage.py dsched sync` and after migrate:
    # {name: {"cron": ..., "time_zone": ...} or {"every": n, "unit": ...} or {"at": ...},
    #  plus "topic", "event_type" and optional "data", "host_id", "priority", ...}.
    "SCHEDULES": {},
    # Sync declared schedules at the end of every `migrate` (on deploy).
    "SYNC_ON_MIGRATE": True,
    # -- delivery (the outbox relay, docs/delivery.md) -------------------------------------
    # Where each topic's messages go: {topic or glob pattern: {"BACKEND": ..., "OPTIONS": {...}}}.
    # BACKEND is an alias ("handlers", "tasks", "redis", "rabbitmq", "webhook") or the dotted
    # path of a Transport subclass. "*" is the fallback for topics no other key matches.
    "TRANSPORTS": {"*": {"BACKEND": "handlers"}},
    # Modules to import when a relay starts, so their @handler registrations exist (besides
    # every installed app's dsched_handlers module, imported automatically).
    "HANDLER_MODULES": [],
    # Messages one relay claims per round trip.
    "RELAY_BATCH_SIZE": 100,
    # Longest sleep of an idle relay, in seconds (it also wakes on NOTIFY from each fire).
    "RELAY_POLL_INTERVAL": 2.0,
    # Attempts before a message is dead-lettered (DELIVERY_FAILED).
    "RELAY_MAX_ATTEMPTS": 10,
    # Seconds a claim lasts; a relay that dies holding messages frees them after this.
    "RELAY_VISIBILITY_TIMEOUT": 60.0,
    # Retry delay after failed attempt n: min(RETRY_MAX, RETRY_BASE * 2**(n-1)), jittered
    # uniformly down to half of it.
    "RELAY_RETRY_BASE": 2.0,
    "RELAY_RETRY_MAX": 600.0,
    # Hosts webhooks may be sent (or redirected) to: "host", "host:port" or ".domain".
    "WEBHOOK_ALLOWED_HOSTS": [],
    # -- retention ---------------------------------------------------------------------------
    # Delivered outbox messages and events older than this many days are deleted (None: never).
    "RETENTION_DAYS": 45,
    # Rows deleted per transaction by retention.
    "RETENTION_BATCH_SIZE": 1000,
    # Seconds between two retention passes of the leader.
    "RETENTION_INTERVAL": 3600.0,
}


class AppSettings:
    """Attribute access to ``DSCHED_*`` settings with the defaults above."""

    prefix = "DSCHED_"

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(name)
        return getattr(settings, self.prefix + name, DEFAULTS[name])


app_settings = AppSettings()
