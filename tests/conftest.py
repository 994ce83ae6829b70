from __future__ import annotations

import os

import pytest

from tests.factories import ScheduleFactory  # noqa: F401  (handy in -k runs)
from tests.release import dists, installed_wheel  # noqa: F401  (fixtures: the built release)

for name in list(os.environ):
    if name.startswith("DSCHED_") and name not in ("DSCHED_DATA_DIR", "DSCHED_TEST_DB_NAME"):
        del os.environ[name]


@pytest.fixture
def db_now():
    from django_dsched.runtime.clock import database_now

    return database_now


@pytest.fixture
def payload_once(settings):
    """Fires store the payload and metadata only in the event (DSCHED_OUTBOX_PAYLOAD_ONCE on:
    the outbox rows have NULL in both)."""
    settings.DSCHED_OUTBOX_PAYLOAD_ONCE = True
