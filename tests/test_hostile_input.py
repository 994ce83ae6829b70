"""Hostile input at every door: a clear field error, never an error page or a RecursionError.

JSON nested 10,000 and 100,000 deep (as text, ``json.loads`` itself would recurse; as
Python objects, ``json.dumps`` would), JSON of several megabytes, and names or reasons with
control characters, through the admin's forms, the Python API, declared schedules and the
``dsched`` command. And text that reaches log lines has its control characters escaped.
"""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from django_dsched import api
from django_dsched.declared import sync
from django_dsched.exceptions import ValidationError
from django_dsched.models import Event, Schedule
from django_dsched.outbox.handlers import registry
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db

DEPTHS = [10_000, 100_000]
BAD_NAMES = [
    "two\nlines",
    "carriage\rreturn",
    "\x1b[31mred",
    "nul\x00",
    "tab\there",
    "\u2028sep",
    "rtl\u202eevil",
]

TOO_DEEP = "nested deeper than 32 levels"
TOO_LARGE = "the limit is 65536 bytes"
NOT_PRINTABLE = "Use printable characters only"


def deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth  # 200 KB at 100,000: under the size limit


def deep_object(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def huge_text(megabytes: float) -> str:
    return json.dumps({"blob": "x" * int(megabytes * 1024 * 1024)})


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def form_data(**overrides: str) -> dict[str, str]:
    data = {
        "schedule_name": "hostile",
        "host_id": "00000000-0000-0000-0000-000000000000",
        "schedule_kind": "INTERVAL",
        "frequency_time": "5",
        "frequency_unit": "MINUTES",
        "time_zone": "UTC",
        "misfire_policy": "COALESCE",
        "catch_up_limit": "100",
        "jitter_seconds": "0",
        "priority": "0",
        "event_topic": "reports",
        "event_type": "report.build",
        "event_data": "{}",
    }
    return {**data, **overrides}


def field_errors(response: Any, field: str) -> list[str]:
    assert response.status_code == 200, response.status_code  # the form again, not an error
    return list(response.context["adminform"].form.errors.get(field, []))


def create(**overrides: Any) -> Schedule:
    arguments = {"every": 5, "unit": "MINUTES", "topic": "reports", "event_type": "r.b"}
    return api.create_interval(overrides.pop("name", "hostile"), **{**arguments, **overrides})


# -- deep and huge JSON -----------------------------------------------------------------------
@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_json_text_in_the_admin_add_form_is_a_field_error(admin_client, depth):
    url = reverse("admin:dsched_schedule_add")
    response = admin_client.post(url, form_data(event_data=deep_text(depth)))
    assert any(TOO_DEEP in e for e in field_errors(response, "event_data"))
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_json_text_in_the_admin_change_form_is_a_field_error(admin_client, depth):
    schedule = ScheduleFactory()
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    data = form_data(
        schedule_name=schedule.schedule_name,
        event_data=deep_text(depth),
        seen_version=str(schedule.aggregate_version),
    )
    response = admin_client.post(url, data)
    assert any(TOO_DEEP in e for e in field_errors(response, "event_data"))
    schedule.refresh_from_db()
    assert schedule.event_data == {"format": "pdf"}


def test_megabytes_of_json_in_the_admin_form_are_a_field_error(admin_client):
    # Under Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB); above it Django refuses the
    # whole request with 400 before any form runs.
    response = admin_client.post(
        reverse("admin:dsched_schedule_add"), form_data(event_data=huge_text(2))
    )
    assert any(TOO_LARGE in e for e in field_errors(response, "event_data"))
    big = admin_client.post(
        reverse("admin:dsched_schedule_add"), form_data(event_data=huge_text(3))
    )
    assert big.status_code == 400
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_data_through_the_python_api_is_a_field_error(depth):
    with pytest.raises(ValidationError) as refused:
        create(data=deep_object(depth))
    assert TOO_DEEP in " ".join(refused.value.message_dict["data"])
    assert not Schedule.objects.exists() and not Event.objects.exists()


def test_megabytes_of_data_through_the_python_api_are_a_field_error():
    with pytest.raises(ValidationError) as refused:
        create(data={"blob": "x" * 5 * 1024 * 1024})
    assert TOO_LARGE in " ".join(refused.value.message_dict["data"])


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_data_in_a_declared_schedule_is_a_clear_error(depth, settings):
    spec = {"every": 5, "unit": "MINUTES", "topic": "reports", "event_type": "r.b"}
    with pytest.raises(
        ValidationError, match=f"declared schedule 'deep': Event data is {TOO_DEEP}"
    ):
        sync({"deep": {**spec, "data": deep_object(depth)}})
    settings.DSCHED_SCHEDULES = {"deep": {**spec, "data": deep_object(depth)}}
    with pytest.raises(CommandError, match=TOO_DEEP):
        call_command("dsched", "sync")
    assert not Schedule.objects.exists()


# -- names and reasons with control characters ------------------------------------------------
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_with_control_characters_is_refused_by_the_api(name):
    with pytest.raises(ValidationError) as refused:
        create(name=name)
    assert NOT_PRINTABLE in " ".join(refused.value.message_dict["name"])
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_with_control_characters_is_a_field_error_in_the_admin(admin_client, name):
    response = admin_client.post(
        reverse("admin:dsched_schedule_add"), form_data(schedule_name=f"ok {name} ok")
    )
    assert field_errors(response, "schedule_name")
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_declared_name_with_control_characters_is_refused(name):
    spec = {"every": 5, "unit": "MINUTES", "topic": "reports", "event_type": "r.b"}
    with pytest.raises(ValidationError, match=NOT_PRINTABLE):
        sync({name: spec})
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("reason", ["line\nbreak", "\x1b]0;title\x07", "\u202eevil"])
def test_a_pause_reason_with_control_characters_is_refused(admin_client, reason):
    schedule = create()
    with pytest.raises(ValidationError, match=NOT_PRINTABLE):
        api.pause(schedule.schedule_name, reason=reason)
    with pytest.raises(CommandError, match=NOT_PRINTABLE):
        call_command("dsched", "pause", schedule.schedule_name, "--reason", reason)
    response = admin_client.post(
        reverse("admin:dsched_schedule_changelist"),
        {
            "action": "pause_selected",
            "index": "0",
            "post": "yes",
            "reason": reason,
            helpers.ACTION_CHECKBOX_NAME: [str(schedule.pk)],
        },
    )
    assert response.status_code == 200  # the confirmation page again, with the error
    assert NOT_PRINTABLE in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.state == "ACTIVE"


def test_an_instance_id_with_control_characters_is_refused():
    with pytest.raises(CommandError, match="printable"):
        call_command("run_scheduler", "--instance-id", "a\nb", "--once")


# -- what reaches logs and terminals is escaped -----------------------------------------------
def legacy_row(name: str, db_now) -> Schedule:
    """A bad row written before names were checked (or by hand in SQL)."""
    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    sql("UPDATE schedule_t SET schedule_name = %s WHERE schedule_id = %s", [name, schedule.pk])
    return schedule


@pytest.mark.django_db(transaction=True)
def test_a_fire_log_line_escapes_a_legacy_name(db_now, caplog):
    legacy_row("forged\nINFO fired 999 schedule(s) \x1b[2J", db_now)
    with caplog.at_level(logging.INFO, logger="django_dsched"):
        assert Scheduler(instance_id="logs").run_until_idle() == 1
    fired = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fired")]
    assert fired == [
        "fired 1 schedule(s): forged\\nINFO fired 999 schedule(s) \\x1b[2J instance=logs epoch=1"
    ]


@pytest.mark.django_db(transaction=True)
def test_a_delivery_error_from_an_endpoint_is_logged_on_one_line(db_now, caplog, settings):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}

    def refuse(event: dict[str, Any]) -> None:
        raise RuntimeError("503\r\nWARNING forged line\x1b[31m")

    ScheduleFactory(start_ts=db_now() - timedelta(seconds=5))
    assert Scheduler(instance_id="s").run_until_idle() == 1
    registry.register(refuse, topic="reports")
    try:
        with caplog.at_level(logging.WARNING, logger="django_dsched"):
            Relay(instance_id="r").run_until_idle()
    finally:
        registry.unregister(refuse, topic="reports")
    lines = [r.getMessage() for r in caplog.records if "delivery failed" in r.getMessage()]
    assert lines and all("\n" not in line and "\x1b" not in line for line in lines)
    assert "503\\r\\nWARNING forged line\\x1b[31m" in lines[0]


def test_dsched_list_and_show_escape_a_legacy_name(db_now):
    legacy_row("evil\x1b]0;pwned\x07name", db_now)
    out = io.StringIO()
    call_command("dsched", "list", stdout=out)
    assert "evil\\x1b]0;pwned\\x07name" in out.getvalue()
    assert "\x1b" not in out.getvalue()


def test_a_refused_edit_shows_the_saved_timing_in_the_preview(admin_client):
    schedule = ScheduleFactory()
    url = reverse("admin:dsched_schedule_change", args=[schedule.pk])
    # No start and a bad topic: refused; the page's preview still reads the saved schedule.
    data = form_data(
        schedule_name=schedule.schedule_name,
        event_topic="bad topic",
        seen_version=str(schedule.aggregate_version),
    )
    response = admin_client.post(url, data)
    assert field_errors(response, "event_topic")
    assert len(response.context["dsched_preview"]) > 0
