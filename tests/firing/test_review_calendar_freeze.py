"""Review probe: a calendar edit that drops every slot (a freeze over the whole week) sets
the schedules using it aside with the reason, as any row the scheduler cannot plan; it
does not complete them, which no later calendar edit could undo. Edited back, the
schedule resumes and fires; the other schedules fire throughout."""

from __future__ import annotations

from datetime import time, timedelta

import pytest

from django_dsched import api
from django_dsched.changes import calendars
from django_dsched.models import Event
from django_dsched.scheduler import Scheduler
from tests.helpers import sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "finance", "event_type": "close.month"}
WHOLE_WEEK = [
    calendars.windows_of([{"kind": "WEEKLY", "start_day": 0, "start_time": time(0),
                           "end_day": 6, "end_time": time(23, 59)}])[0],
    calendars.windows_of([{"kind": "WEEKLY", "start_day": 6, "start_time": time(23, 59),
                           "end_day": 0, "end_time": time(0)}])[0],
]  # fmt: skip


def due_an_hour_ago(*schedules) -> None:
    now = sql("SELECT statement_timestamp()")[0][0]
    for schedule in schedules:
        sql(
            "UPDATE schedule_t SET next_slot_ts = %s, next_run_ts = %s WHERE schedule_id = %s",
            [now - timedelta(hours=1), now - timedelta(hours=1), schedule.pk],
        )


@pytest.mark.parametrize("overlap", ["ALLOW_ALL", "SKIP"])
def test_a_freeze_over_the_whole_week_sets_its_schedules_aside_not_completed(overlap):
    now = sql("SELECT statement_timestamp()")[0][0]
    ops = api.create_calendar("Ops", weekend=[])
    frozen = api.create_rrule(
        "hourly", rrule="FREQ=HOURLY", start=now - timedelta(days=1), calendars=["Ops"],
        overlap_policy=overlap, **COMMON,
    )  # fmt: skip
    plain = api.create_rrule("plain", rrule="FREQ=HOURLY", start=now - timedelta(days=1), **COMMON)
    calendars.save_calendar(ops, WHOLE_WEEK)
    due_an_hour_ago(frozen, plain)

    def planned() -> str:
        Scheduler(instance_id="test", batch_size=50).run_until_idle()
        frozen.refresh_from_db()
        return frozen.state if frozen.state != "ACTIVE" else ""

    assert (
        wait_for(planned, timeout=60, what="the frozen row planned") == "SET_ASIDE"
    )  # was COMPLETED
    assert "its calendars drop every slot" in frozen.set_aside_reason
    assert Event.objects.filter(aggregate_id=plain.pk, scheduled_ts__isnull=False).exists()

    calendars.save_calendar(ops, [])  # the freeze lifted: resumed, it fires again
    assert api.resume(frozen)
    frozen.refresh_from_db()
    assert frozen.state == "ACTIVE"
    assert frozen.next_slot_ts > now - timedelta(hours=1)
