"""The bulk calls behind a real PgBouncer in transaction mode (docs/pgbouncer.md).

Their statements bind on the server (unnamed statements, binary arrays) and a bulk create
pipelines its chunks: two processes sharing a pool smaller than its clients each make
several bulk calls, every one in its own transaction (so each may land on another backend).
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_dsched.enums import ScheduleState
from django_dsched.models import Event, Schedule
from tests.pgbouncer import PgBouncer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CALLS = 4
ITEMS = 3_000  # more than the first chunk: two statements in flight per call

SCRIPT = f"""
import django
django.setup()
from datetime import timedelta
from django.db import connection
from django_dsched import api

tag = __import__("sys").argv[1]
for call in range({CALLS}):
    created = api.bulk_create(
        [
            api.Once(
                delay=timedelta(hours=1), key=f"{{tag}}-{{call}}-{{n}}", data={{"n": n}},
                topic="mail", event_type="reminder.send",
            )
            for n in range({ITEMS})
        ]
    )
    assert len(created) == {ITEMS}
    again = api.bulk_create(  # known keys: the existing schedules
        [api.Once(delay=timedelta(hours=1), key=f"{{tag}}-{{call}}-{{n}}",
                  topic="mail", event_type="reminder.send") for n in range(5)]
    )
    assert [s.pk for s in again] == [s.pk for s in created[:5]]
    count = api.bulk_cancel([s.pk for s in created[: {ITEMS} // 2]])
    assert count.changed == {ITEMS} // 2, count
    connection.close()  # the next call may get another backend
print("ok", tag)
"""


def test_bulk_calls_through_a_transaction_pool(pgbouncer: PgBouncer) -> None:
    pgbouncer.run_clients(
        connection.settings_dict["NAME"],
        SCRIPT,
        ["a", "b"],
        "tests.integration.pooled_settings",
    )
    total = 2 * CALLS * ITEMS
    assert Schedule.objects.count() == total
    assert Schedule.objects.filter(state=ScheduleState.CANCELLED).count() == total // 2
    assert Event.objects.filter(event_type="dsched.schedule.created").count() == total
    assert Event.objects.filter(event_type="dsched.schedule.cancelled").count() == total // 2
