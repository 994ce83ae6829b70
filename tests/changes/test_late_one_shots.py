"""A one-shot created after its time (issue 41): it was accepted silently and fired four
weeks late. Now every door says so: the created schedule's ``late`` (Python API), REST's
``late`` (single and bulk creates), a warning in the admin and in the logs; and its misfire
rules decide, as for any missed slot: it fires at once, late, or, later than its grace
(``SKIP``: ``DSCHED_MISFIRE_GRACE_SECONDS`` unless ``misfire_grace_seconds``), it is
skipped: completed without firing."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched import api
from django_dsched.changes.creates import LATE_FIRES_NOW, LATE_SKIPPED
from django_dsched.enums import ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from tests.fire_path import fire
from tests.rest.conftest import APIClient

pytestmark = pytest.mark.django_db

REMINDER = {"topic": "mail", "event_type": "invoice.reminder"}
FOUR_WEEKS = timedelta(weeks=4)


def test_a_late_one_shot_says_so_and_fires_at_once(db_now, fence, caplog):
    with caplog.at_level(logging.WARNING, logger="django_dsched"):
        made = api.create_once("remind-1", at=db_now() - FOUR_WEEKS, **REMINDER)
    assert made.late is not None
    assert made.late.outcome == LATE_FIRES_NOW
    assert FOUR_WEEKS <= made.late.by < FOUR_WEEKS + timedelta(minutes=1)
    assert "created 2419" in caplog.text and "it fires now, late" in caplog.text
    assert fire(fence).fired == 1
    assert Schedule.objects.get().state == ScheduleState.COMPLETED
    assert OutboxMessage.objects.count() == 1


def test_skip_drops_a_late_one_shot_without_firing(db_now, fence):
    made = api.create_once("remind-2", at=db_now() - FOUR_WEEKS, misfire_policy="SKIP", **REMINDER)
    assert made.late is not None and made.late.outcome == LATE_SKIPPED
    fire(fence)
    done = Schedule.objects.get()
    assert (done.state, done.fire_count, done.misfire_count) == (ScheduleState.COMPLETED, 0, 1)
    assert not OutboxMessage.objects.exists()
    assert not Event.objects.filter(scheduled_ts__isnull=False).exists()


def test_within_its_grace_a_skip_one_shot_still_fires(db_now, fence):
    made = api.create_once(
        "remind-3",
        at=db_now() - timedelta(seconds=30),
        misfire_policy="SKIP",
        misfire_grace_seconds=3600,
        **REMINDER,
    )
    assert made.late is not None and made.late.outcome == LATE_FIRES_NOW
    assert fire(fence).fired == 1


def test_on_time_one_shots_and_other_kinds_are_not_late(db_now):
    assert api.create_once("soon", at=db_now() + timedelta(hours=1), **REMINDER).late is None
    assert api.create_once("now", delay=timedelta(0), **REMINDER).late is None
    assert (
        api.create_interval("tick", every=1, start=db_now() - FOUR_WEEKS, **REMINDER).late is None
    )


@pytest.fixture
def root():
    return APIClient(User.objects.create_superuser("root", "root@example.com", "pw"))


def test_rest_answers_late_on_create_and_in_bulk(root, db_now):
    past = (db_now() - FOUR_WEEKS).isoformat()
    once = {**REMINDER, "kind": "ONCE", "at": past}
    fires = root.post("schedules/", {**once, "name": "a"})
    assert fires.status_code == 201, fires.body
    assert fires.body["late"]["outcome"] == "FIRES_NOW"
    assert fires.body["late"]["by_seconds"] >= FOUR_WEEKS.total_seconds()
    skipped = root.post("schedules/", {**once, "name": "b", "misfire_policy": "SKIP"})
    assert skipped.body["late"]["outcome"] == "SKIPPED"
    on_time = root.post("schedules/", {**once, "name": "c", "at": "2031-01-01T00:00:00Z"})
    assert on_time.body["late"] is None
    assert root.get(f"schedules/{fires.body['id']}/").body["late"] is None  # a create's only
    bulk = root.post(
        "schedules/bulk/",
        [{**once, "name": "d"}, {**once, "name": "e", "at": "2031-01-01T00:00:00Z"}],
    )
    assert bulk.status_code == 201, bulk.body
    assert [r["late"] and r["late"]["outcome"] for r in bulk.body["results"]] == [
        "FIRES_NOW",
        None,
    ]


def test_the_admin_warns_when_a_one_shot_is_added_late(client, db_now):
    client.force_login(User.objects.create_superuser("staff", "s@example.com", "pw"))
    past = db_now() - FOUR_WEEKS
    response = client.post(
        reverse("admin:dsched_schedule_add"),
        {
            "schedule_name": "late-one",
            "host_id": "00000000-0000-0000-0000-000000000000",
            "schedule_kind": "ONCE",
            "time_zone": "UTC",
            "start_ts_0": f"{past:%Y-%m-%d}",
            "start_ts_1": f"{past:%H:%M:%S}",
            "jitter_seconds": "0",
            "priority": "0",
            "misfire_policy": "SKIP",
            "catch_up_limit": "100",
            "event_topic": "mail",
            "event_type": "invoice.reminder",
            "event_data": "{}",
        },
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert any("it will be skipped" in m for m in shown), shown
