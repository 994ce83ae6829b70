"""Single creates behind a real PgBouncer 1.18 in transaction mode, which cannot carry a
prepared statement from one transaction to the next (docs/pgbouncer.md).

``DSCHED_PREPARE_CREATES`` defaults to preparing a session's creates from its second one on,
unless the session goes through a pooler: here the settings do not say so (no
``DISABLE_SERVER_SIDE_CURSORS``), so the pooler is found by its cancel key. Two processes
share a pool smaller than its clients and create one schedule per transaction: were a
statement prepared, a later create would land on a backend that never saw it and fail.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_dsched.models import Event, Schedule
from tests.pgbouncer import PgBouncer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CREATES = 200

SCRIPT = f"""
import django
django.setup()
from datetime import timedelta
from django.db import connection
from django_dsched import api
from django_dsched.changes import single_insert

tag = __import__("sys").argv[1]
for n in range({CREATES}):
    api.create_once(f"{{tag}}-{{n}}", delay=timedelta(hours=1), data={{"n": n}},
                    topic="mail", event_type="reminder.send")
assert single_insert._prepares(connection) is False
print("ok", tag)
"""


def test_single_creates_through_a_transaction_pool_prepare_nothing(pgbouncer: PgBouncer) -> None:
    pgbouncer.run_clients(
        connection.settings_dict["NAME"],
        SCRIPT,
        ["a", "b", "c"],
        "tests.integration.relay_settings",
    )
    assert Schedule.objects.count() == Event.objects.count() == 3 * CREATES
