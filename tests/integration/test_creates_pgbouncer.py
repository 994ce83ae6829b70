"""Single creates behind a real PgBouncer 1.18 in transaction mode, which cannot carry a
prepared statement from one transaction to the next (docs/pgbouncer.md).

``DSCHED_PREPARE_CREATES`` defaults to preparing a session's creates from its second one on,
unless the session goes through a pooler: here the settings do not say so (no
``DISABLE_SERVER_SIDE_CURSORS``), so the pooler is found by its cancel key. Two processes
share a pool smaller than its clients and create one schedule per transaction: were a
statement prepared, a later create would land on a backend that never saw it and fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_dsched.models import Event, Schedule
from tests.pgbouncer import PgBouncer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CREATES = 200

SCRIPT = f"""
import django
django.setup()
from datetime import timedelta
from django.db import connection
from django_dsched import api
from django_dsched.schedules import single_insert

tag = __import__("sys").argv[1]
for n in range({CREATES}):
    api.create_once(f"{{tag}}-{{n}}", delay=timedelta(hours=1), data={{"n": n}},
                    topic="mail", event_type="reminder.send")
assert single_insert._prepares(connection) is False
print("ok", tag)
"""


def test_single_creates_through_a_transaction_pool_prepare_nothing(pgbouncer: PgBouncer) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": pgbouncer.url(connection.settings_dict["NAME"]),
        "DJANGO_SETTINGS_MODULE": "tests.integration.relay_settings",
        "PYTHONPATH": str(ROOT),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, tag],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for tag in ("a", "b", "c")
    ]
    for process in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
    assert Schedule.objects.count() == Event.objects.count() == 3 * CREATES
