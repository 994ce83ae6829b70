"""The schedule list's pages in next-fire order, read part by part (the active schedules a
range of the due index), are the pages of the one ``ORDER BY`` they stand for: no row
skipped, none twice, ties broken the same way, whatever page and size."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.urls import reverse

from django_dsched.admin import schedule_list
from django_dsched.admin.schedules import ScheduleAdmin
from django_dsched.models import Schedule
from django_dsched.models.order import next_fire_order, read_in_parts
from tests.factories import ScheduleFactory
from tests.health.make import db_now

pytestmark = pytest.mark.django_db


def mixed() -> list[str]:
    """Schedules of every state with ties: the same next run at two priorities, paused
    ones due before active ones, ended ones fired at different times or never. Returns
    their names in next-fire order, as written by hand."""
    now = db_now()
    rows = [
        # name, state, next run (minutes from now), priority, last fired (minutes ago)
        ("a-soon-high", "ACTIVE", 5, 9, None),
        ("a-soon-low", "ACTIVE", 5, 1, None),
        ("a-soon-mid-1", "ACTIVE", 5, 5, 30),
        ("a-soon-mid-2", "ACTIVE", 5, 5, 40),
        ("a-later", "ACTIVE", 60, 0, 10),
        ("a-late", "ACTIVE", -10, 0, 70),
        ("p-early", "PAUSED", -100, 0, 200),
        ("p-later", "PAUSED", 100, 0, None),
        ("x-aside", "SET_ASIDE", -5, 0, 20),
        ("x-done-recent", "COMPLETED", -500, 0, 1),
        ("x-done-old", "COMPLETED", 500, 0, 300),
        ("x-never", "CANCELLED", 1, 0, None),
    ]
    for name, state, minutes, priority, fired in rows:
        schedule = ScheduleFactory(schedule_name=name)
        Schedule.objects.filter(pk=schedule.pk).update(
            state=state,
            active=state == "ACTIVE",
            next_run_ts=now + timedelta(minutes=minutes),
            next_slot_ts=now + timedelta(minutes=minutes),
            priority=priority,
            last_fired_ts=None if fired is None else now - timedelta(minutes=fired),
        )
    # Equal next run and priority: the newest id first (ids are time-ordered) in the one
    # ORDER BY; in the due index's order when read in parts (see tied()).
    ties = list(
        Schedule.objects.filter(schedule_name__startswith="a-soon-mid")
        .order_by("-pk")
        .values_list("schedule_name", flat=True)
    )
    return [
        "a-late",
        "a-soon-high",
        *ties,
        "a-soon-low",
        "a-later",
        "p-early",
        "p-later",
        "x-done-recent",
        "x-aside",
        "x-done-old",
        "x-never",
    ]


def tied(names: list[str]) -> list[str]:
    """Active schedules tied on next run and priority as one (the parts do not order them
    among themselves: the due index does)."""
    return [re.sub(r"-\d$", "", name) for name in names]


def test_pages_read_in_parts_are_the_pages_of_the_whole_order():
    expected = mixed()
    ordered = Schedule.objects.order_by(*next_fire_order())
    assert list(ordered.values_list("schedule_name", flat=True)) == expected
    names = dict(Schedule.objects.values_list("pk", "schedule_name"))
    every = [names[pk] for pk in read_in_parts(ordered, 0, 100)]
    assert sorted(every) == sorted(expected)
    for size in (1, 2, 5, 7):
        walked: list[str] = []
        for start in range(len(expected) + 2):
            page = [names[pk] for pk in read_in_parts(ordered, start, size)]
            assert tied(page) == tied(expected[start : start + size]), (start, size)
            if start % size == 0:
                walked += page
        assert sorted(walked) == sorted(expected)  # each once, ties too
    # A filter applies to every part.
    topic = Schedule.objects.filter(schedule_name__in=["a-later", "p-later", "x-never"])
    page = [names[pk] for pk in read_in_parts(topic.order_by(*next_fire_order()), 1, 5)]
    assert page == ["p-later", "x-never"]


def test_the_admin_pages_through_every_schedule_once_in_order(client, monkeypatch):
    """Past the exact count, the list reads its pages part by part: walking them shows every
    schedule once, in the order of the whole list, each row with its health."""
    expected = mixed()
    # Past the exact count, the pages follow the planner's estimate of the rows: from fresh
    # statistics here (stale ones, from the tests before, could count fewer pages).
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE schedule_t")
    monkeypatch.setattr(ScheduleAdmin, "list_per_page", 5)
    monkeypatch.setattr(schedule_list, "EXACT_COUNT_LIMIT", 3)
    monkeypatch.setattr("django_dsched.admin.paging.EXACT_COUNT_LIMIT", 3)
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    url = reverse("admin:dsched_schedule_changelist")
    seen: list[str] = []
    for page in range(3):
        html = client.get(url, {"p": page + 1}).content.decode()
        seen += re.findall(r"Select this object for an action - ([\w-]+)", html)
        if page == 0:
            assert 'dsched-health-late"' in html  # a-late, read with its health
    assert tied(seen) == tied(expected) and sorted(seen) == sorted(expected)
