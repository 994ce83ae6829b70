"""A zoned schedule's times as its staff read them (issue 41): on the wall clock of the
schedule's zone first, UTC beside it, at every door a person reads or edits them (admin
list, change form, panels, `dsched show/list/preview`, REST's `local`).

The case: a Sydney invoice run "on the last day of the month at 09:00", an interval of one
month anchored on 2026-12-31 09:00 AEDT (2026-12-30 22:00 UTC)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from django_dsched import api
from django_dsched.models import Schedule
from tests.rest.conftest import APIClient

pytestmark = pytest.mark.django_db

SYDNEY = ZoneInfo("Australia/Sydney")
START = datetime(2026, 12, 31, 9, tzinfo=SYDNEY)  # 2026-12-30 22:00 UTC
MONTH_ENDS = ["2026-12-31", "2027-01-31", "2027-02-28", "2027-03-31"]


@pytest.fixture
def invoices():
    return api.create_interval(
        "invoices-acme",
        every=1,
        unit="MONTHS",
        start=START,
        time_zone="Australia/Sydney",
        topic="billing",
        event_type="invoice.monthly",
    )


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_list_shows_the_next_run_on_the_schedules_clock_then_utc(staff, invoices):
    page = text(staff.get(reverse("admin:dsched_schedule_changelist")).content.decode())
    assert "2026-12-31 09:00:00 AEDT 2026-12-30 22:00:00 UTC" in page


def test_the_change_page_shows_and_previews_in_the_schedules_zone(staff, invoices):
    url = reverse("admin:dsched_schedule_change", args=[invoices.pk])
    response = staff.get(url)
    page = text(response.content.decode())
    # The preview: the last day of each month, 09:00 in Sydney (not 12-30, 01-30, ...).
    for day in MONTH_ENDS:
        assert f"{day} 09:00:00 AE" in page, day
    assert "2027-01-30 22:00:00 UTC" in page  # UTC beside it
    assert "Shown on the wall clock of the schedule's time zone, Australia/Sydney" in page
    form = response.context["adminform"].form
    # The start box holds the Sydney wall time, and says so.
    assert form["start_ts"].value() == START.astimezone(UTC)
    html = str(form["start_ts"])
    assert 'value="2026-12-31"' in html and 'value="09:00:00"' in html
    assert "Australia/Sydney" in str(form.fields["start_ts"].help_text)
    assert "Saved: 2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)" in str(
        form.fields["start_ts"].help_text
    )


def change_data(schedule: Schedule, **changes: str) -> dict[str, str]:
    data = {
        "schedule_name": schedule.schedule_name,
        "host_id": str(schedule.host_id),
        "seen_version": str(schedule.aggregate_version),
        "schedule_kind": schedule.schedule_kind,
        "frequency_time": str(schedule.frequency_time),
        "frequency_unit": schedule.frequency_unit,
        "cron_expression": "",
        "time_zone": schedule.time_zone,
        "start_ts_0": "2026-12-31",
        "start_ts_1": "09:00:00",
        "end_ts_0": "",
        "end_ts_1": "",
        "jitter_seconds": "0",
        "priority": "0",
        "misfire_policy": "COALESCE",
        "catch_up_limit": "100",
        "event_topic": schedule.event_topic,
        "event_type": schedule.event_type,
        "event_data": "{}",
    }
    data.update(changes)
    return data


def test_the_form_takes_start_and_end_on_the_schedules_clock(staff, invoices):
    url = reverse("admin:dsched_schedule_change", args=[invoices.pk])
    response = staff.post(url, change_data(invoices, end_ts_0="2027-06-30", end_ts_1="09:00:00"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = Schedule.objects.get()
    assert saved.start_ts == START  # unchanged: the box said 09:00 in Sydney
    assert saved.end_ts == datetime(2027, 6, 30, 9, tzinfo=SYDNEY)
    # A zone changed in the same post: the times are read on the new zone's clock.
    saved.refresh_from_db()
    response = staff.post(url, change_data(saved, time_zone="Europe/Brussels"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Schedule.objects.get().start_ts == datetime(
        2026, 12, 31, 9, tzinfo=ZoneInfo("Europe/Brussels")
    )


def test_a_wall_time_a_dst_change_skips_is_refused_naming_the_zone(staff, invoices):
    url = reverse("admin:dsched_schedule_change", args=[invoices.pk])
    # Sydney's clocks go from 02:00 to 03:00 on 2026-10-04.
    response = staff.post(url, change_data(invoices, start_ts_0="2026-10-04", start_ts_1="02:30"))
    assert response.status_code == 200
    errors = " ".join(response.context["adminform"].form.errors["start_ts"])
    assert "Australia/Sydney" in errors


def run(*args: str) -> str:
    out = StringIO()
    call_command("dsched", *args, stdout=out)
    return out.getvalue()


def test_dsched_show_list_and_preview_read_in_the_schedules_zone(invoices):
    shown = run("show", "invoices-acme")
    assert "zone       Australia/Sydney" in shown
    assert "start      2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)" in shown
    assert "next       2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)" in shown
    assert "next 2026-12-31 09:00:00 AEDT (2026-12-30 22:00:00 UTC)" in run("list")
    lines = run("preview", "invoices-acme", "-n", "4").splitlines()
    assert [line.split("T")[0] for line in lines] == MONTH_ENDS
    assert lines[0] == "2026-12-31T09:00:00+11:00  2026-12-30T22:00:00+00:00"


def test_rest_answers_the_local_times_beside_the_utc_ones(invoices):
    root = APIClient(User.objects.create_superuser("api", "api@example.com", "pw"))
    body = root.get(f"schedules/{invoices.pk}/").body
    assert body["start"] == "2026-12-30T22:00:00Z"
    assert body["local"]["start"] == "2026-12-31T09:00:00+11:00"
    assert body["local"]["next_run"] == "2026-12-31T09:00:00+11:00"
    assert [t[:10] for t in body["next_fires_local"][:4]] == MONTH_ENDS


def test_a_one_shots_description_gives_its_zone_and_utc():
    once = api.create_once(
        "remind",
        at=datetime(2031, 3, 1, 9, tzinfo=SYDNEY),
        topic="mail",
        event_type="remind",
    )
    assert once.time_zone == "UTC"  # a one-shot given no zone reads in UTC
    Schedule.objects.filter(pk=once.pk).update(time_zone="Australia/Sydney")
    run_out = run("show", "remind")
    assert "once at 2031-03-01 09:00:00 AEDT (2031-02-28 22:00:00 UTC), Australia/Sydney" in (
        run_out
    )
