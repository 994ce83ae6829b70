"""Review probe: a calendar keeps its host at every door. Moved (the admin's host field, the
Python API's save), the operator's shared calendar became tenant A's while tenant B's
schedules kept using it: B planned with A's calendar, and A's delete refusal named B's
schedules. REST refused the move already; the others now refuse it in REST's words."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_dsched import api
from django_dsched.changes import calendars
from django_dsched.exceptions import ValidationError
from django_dsched.models import Calendar
from tests.rest.hosts import HOST_A, HOST_B

pytestmark = pytest.mark.django_db

MESSAGE = "A calendar cannot move to another host."


def test_a_calendar_in_use_by_another_tenant_cannot_move_to_a_tenant(admin_client):
    shared = api.create_calendar("Shared", weekend=[])
    api.create_interval(
        "b-payroll", every=1, calendars=[shared], host_id=HOST_B, topic="t", event_type="e"
    )
    form = {
        "name": "Shared",
        "host_id": str(HOST_A),
        "weekend_days": "",
        "windows-TOTAL_FORMS": "0",
        "windows-INITIAL_FORMS": "0",
        "windows-MIN_NUM_FORMS": "0",
        "windows-MAX_NUM_FORMS": "100",
    }
    response = admin_client.post(reverse("admin:dsched_calendar_change", args=[shared.pk]), form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["host_id"] == [MESSAGE]

    shared.host_id = HOST_A
    with pytest.raises(ValidationError) as refused:
        calendars.save_calendar(shared)
    assert refused.value.message_dict == {"host_id": [MESSAGE]}
    assert Calendar.objects.get(pk=shared.pk).host_id != HOST_A


def test_the_python_api_refuses_a_bad_calendar_with_dscheds_own_error():
    # Schedules' creates raise django_dsched.exceptions.ValidationError; calendars raised
    # Django's parent class, which an `except dsched's ValidationError` let through.
    with pytest.raises(ValidationError) as refused:
        api.create_calendar("x", country="XX", years=[2026])
    assert refused.value.message_dict == {
        "country": ["no holidays are known for 'XX': Country XX not available"]
    }
    assert not Calendar.objects.exists()
