"""Bad timing input through the admin's add form: clear errors, nothing written."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched.models import Event, Schedule

pytestmark = pytest.mark.django_db

BASE = {
    "schedule_name": "x",
    "host_id": "00000000-0000-0000-0000-000000000000",
    "schedule_kind": "CRON",
    "time_zone": "UTC",
    "jitter_seconds": "0",
    "priority": "0",
    "misfire_policy": "COALESCE",
    "catch_up_limit": "100",
    "event_topic": "reports",
    "event_type": "report.build",
    "event_data": "{}",
}


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"cron_expression": "61 * * * *"}, "cron_expression", "Invalid cron"),
        ({"cron_expression": ""}, "cron_expression", "needs a cron expression"),
        ({"cron_expression": "0 0 * * *", "time_zone": "Mars/Base"}, "time_zone", "IANA"),
        (
            {"schedule_kind": "INTERVAL", "frequency_unit": "HOURS"},
            "frequency_time",
            "needs a frequency",
        ),
        (
            {
                "cron_expression": "0 0 * * *",
                "start_ts_0": "2026-02-01",
                "start_ts_1": "00:00:00",
                "end_ts_0": "2026-01-01",
                "end_ts_1": "00:00:00",
            },
            "end_ts",
            "end must be after",
        ),
        ({"cron_expression": "0 0 * * *", "catch_up_limit": "0"}, "catch_up_limit", "greater"),
    ],
)
def test_bad_timing_is_refused_in_the_admin(admin_client, changes, field, fragment):
    response = admin_client.post(reverse("admin:dsched_schedule_add"), {**BASE, **changes})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert fragment in " ".join(errors[field]), errors
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


def test_a_never_firing_cron_is_refused(admin_client):
    response = admin_client.post(
        reverse("admin:dsched_schedule_add"), {**BASE, "cron_expression": "0 0 30 2 *"}
    )
    assert "would never fire" in response.content.decode()
    assert not Schedule.objects.exists()


def test_a_one_shots_errors_say_what_the_python_and_rest_apis_say(admin_client):
    """The form's labels are the model's ("start"), but its messages are the other doors'
    (api.create_once(at=..., end=...) and REST's `at`)."""
    from datetime import UTC, datetime

    from django_dsched import api
    from django_dsched.exceptions import ValidationError

    response = admin_client.post(
        reverse("admin:dsched_schedule_add"),
        {
            **BASE,
            "schedule_kind": "ONCE",
            "start_ts_0": "2031-02-01",
            "start_ts_1": "00:00:00",
            "end_ts_0": "2031-01-01",
            "end_ts_1": "00:00:00",
        },
    )
    errors = response.context["adminform"].form.errors
    with pytest.raises(ValidationError) as refused:
        api.create_once(
            at=datetime(2031, 2, 1, tzinfo=UTC),
            end=datetime(2031, 1, 1, tzinfo=UTC),
            topic="reports",
            event_type="report.build",
        )
    assert errors["end_ts"] == refused.value.message_dict["end"]
    assert errors["end_ts"] == ["The end must be after the time the one-shot fires."]
    assert not Schedule.objects.exists()
