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
    "BATCH_SIZE": 500,
    # Take over at once when the leader's database session ends (session advisory lock).
    # Turn off behind a transaction-mode pooler such as PgBouncer.
    "FAST_FAILOVER": True,
    # Row id of the lease in scheduler_lock_t; two clusters on one database use two ids.
    "LOCK_ID": 1,
    # host_id given to schedules created without one.
    "DEFAULT_HOST_ID": uuid.UUID(int=0),
    # Largest event_data accepted, in bytes of compact JSON.
    "EVENT_DATA_MAX_BYTES": 64 * 1024,
    # Deepest nesting of event_data accepted.
    "EVENT_DATA_MAX_DEPTH": 32,
}


class AppSettings:
    """Attribute access to ``DSCHED_*`` settings with the defaults above."""

    prefix = "DSCHED_"

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(name)
        return getattr(settings, self.prefix + name, DEFAULTS[name])


app_settings = AppSettings()
