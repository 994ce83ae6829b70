"""Settings of the scheduler and relay subprocesses in test_celery_worker.py."""

from __future__ import annotations

import os

from tests.integration.relay_settings import *  # noqa: F403

# A send may take two TIMEOUTs (connect, confirm): within half the visibility timeout.
DSCHED_RELAY_VISIBILITY_TIMEOUT = 4.0
DSCHED_TRANSPORTS = {
    "celery": {
        "BACKEND": "tests.outbox.celery_pause.PausingCeleryTransport",
        "OPTIONS": {
            "BROKER_URL": os.environ.get("CELERY_TEST_BROKER_URL", ""),
            "TIMEOUT": 0.9,
            # The schedules name their task and queue in their data (as imported ones do).
            "TASK_FROM_DATA": True,
            "ALLOWED_TASKS": ["tests.*"],
            "OPTIONS_FROM_DATA": ["queue"],
        },
    },
    "*": {"BACKEND": "handlers"},
}
