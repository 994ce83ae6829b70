"""Review probe: the admin keeps a calendar's windows within MAX_WINDOWS, as the Python API
and REST do (every batch planning a schedule that uses the calendar reads it whole)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_dsched.models import Calendar, CalendarWindow
from django_dsched.models.calendar import MAX_WINDOWS

pytestmark = pytest.mark.django_db


def test_the_admin_refuses_more_windows_than_a_calendar_may_have(admin_client):
    count = MAX_WINDOWS + 1
    form = {
        "name": "Too many",
        "host_id": "00000000-0000-0000-0000-000000000000",
        "weekend_days": "5,6",
        "windows-TOTAL_FORMS": str(count),
        "windows-INITIAL_FORMS": "0",
        "windows-MIN_NUM_FORMS": "0",
        "windows-MAX_NUM_FORMS": str(MAX_WINDOWS),
    }
    for index in range(count):
        form.update(
            {
                f"windows-{index}-kind": "WEEKLY",
                f"windows-{index}-start_day": "4",
                f"windows-{index}-start_time": f"{index // 60:02d}:{index % 60:02d}",
                f"windows-{index}-end_day": "5",
                f"windows-{index}-end_time": "06:00",
                f"windows-{index}-time_zone": "UTC",
            }
        )
    response = admin_client.post(reverse("admin:dsched_calendar_add"), form)
    assert response.status_code == 200  # the form again, with its error
    assert f"Please submit at most {MAX_WINDOWS} forms." in response.content.decode()
    assert not Calendar.objects.exists()
    assert not CalendarWindow.objects.exists()
