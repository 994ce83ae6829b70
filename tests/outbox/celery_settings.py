"""Settings of the scheduler and relay subprocesses in test_celery_worker.py."""

from __future__ import annotations

import os

from tests.integration.relay_settings import *  # noqa: F403

DSCHED_TRANSPORTS = {
    "celery": {
        "BACKEND": "tests.outbox.celery_pause.PausingCeleryTransport",
        "OPTIONS": {"BROKER_URL": os.environ.get("CELERY_TEST_BROKER_URL", "")},
    },
    "*": {"BACKEND": "handlers"},
}
