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
