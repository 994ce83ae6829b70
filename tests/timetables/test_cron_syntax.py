"""Cron syntax: only what the documentation promises, refused clearly at every door
(issue 8, item 9). croniter's ``R`` (random) made fires erratic and previews wrong."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.urls import reverse

from django_dsched import api, declared
from django_dsched.exceptions import CronError, ValidationError
from django_dsched.models import Event, Schedule
from django_dsched.timetables.cron import CronTimetable, check_expression

REFUSED = [
    "R * * * *",  # random minute
    "0 R * * *",
    "0 0 * * * R",  # random second
    "H * * * *",  # hashed
    "0 9 L * *",  # last day of the month
    "0 9 1W * *",  # nearest weekday
    "0 9 * * 5#2",  # second Friday
    "0 9 ? * *",
]
ACCEPTED = [
    "*/5 * * * *",
    "0 9 * * 1-5",
    "0 9 * * MON-FRI",
    "0 0 1 jan-mar,oct *",
    "0 6 1 */3 *",
    "5/15 * * * *",
    "0 9 * * 7",
    "0 0 * * * 30",
    "0-30/10 8-18 * * mon,wed,fri",
]


@pytest.mark.parametrize("expression", REFUSED)
def test_extensions_are_refused_with_the_field_named(expression):
    with pytest.raises(CronError, match=r"is not supported in the .* field"):
        check_expression(expression)
    with pytest.raises(CronError):
        CronTimetable(expression)


@pytest.mark.parametrize("expression", ["@daily", "@hourly", "@reboot"])
def test_at_shortcuts_are_refused_naming_the_extension(expression):
    with pytest.raises(CronError, match=rf"'{expression}' is a croniter extension.*'0 0 \* \* \*'"):
        check_expression(expression)


@pytest.mark.parametrize(
    ("expression", "field", "bounds"),
    [
        ("61 * * * *", "minute", "0 to 59"),
        ("0 24 * * *", "hour", "0 to 23"),
        ("0 0 0 * *", "day of month", "1 to 31"),
        ("0 0 1 13 *", "month", "1 to 12"),
        ("0 0 * * 8", "day of week", "0 to 7"),
        ("0 0 * * * 60", "second", "0 to 59"),
        ("0-61/5 * * * *", "minute", "0 to 59"),
    ],
)
def test_a_number_out_of_range_names_its_field(expression, field, bounds):
    with pytest.raises(CronError, match=rf"out of range in the {field} field.*takes {bounds}"):
        check_expression(expression)


@pytest.mark.parametrize("expression", ACCEPTED)
def test_the_documented_syntax_is_accepted(expression):
    check_expression(expression)
    assert CronTimetable(expression).slot_after(datetime(2026, 1, 1, tzinfo=UTC)) is not None


pytestmark_db = pytest.mark.django_db


@pytestmark_db
@pytest.mark.parametrize("expression", ["R * * * *", "0 9 L * *"])
def test_the_api_refuses_them(expression):
    with pytest.raises(ValidationError) as refused:
        api.create_cron("random", cron=expression, topic="t", event_type="x")
    assert "not supported" in " ".join(refused.value.message_dict["cron"])
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


@pytestmark_db
def test_the_admin_refuses_them(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = client.post(
        reverse("admin:dsched_schedule_add"),
        {
            "schedule_name": "random",
            "host_id": "00000000-0000-0000-0000-000000000000",
            "schedule_kind": "CRON",
            "cron_expression": "R 9 * * *",
            "time_zone": "UTC",
            "jitter_seconds": "0",
            "priority": "0",
            "misfire_policy": "COALESCE",
            "catch_up_limit": "100",
            "event_topic": "reports",
            "event_type": "report.build",
            "event_data": "{}",
        },
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "not supported in the minute field" in " ".join(errors["cron_expression"])
    assert not Schedule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_declared_schedules_and_the_sync_command_refuse_them():
    spec = {"cron": "R 2 * * *", "topic": "reports", "event_type": "report.build"}
    with pytest.raises(ValidationError, match=r"declared schedule 'nightly': .*not supported"):
        declared.sync({"nightly": spec})
    with (
        override_settings(DSCHED_SCHEDULES={"nightly": spec}, DSCHED_SYNC_ON_MIGRATE=False),
        pytest.raises(CommandError, match="not supported in the minute field"),
    ):
        call_command("dsched", "sync")
    assert not Schedule.objects.exists()
