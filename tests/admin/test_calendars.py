"""Calendars in the admin: added with a blackout window inline (holidays kept as dates, a
new version per save); staff limited to a tenant see theirs and the operator's shared
ones, change theirs only, and choose among those on a schedule's form; a calendar in use
has no delete."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_dsched import api
from django_dsched.models import Calendar, CalendarWindow
from django_dsched.runtime.clock import database_now
from tests.admin.test_permissions import add_form
from tests.rest.hosts import HOST_A, HOST_B

pytestmark = pytest.mark.django_db

ADD = "admin:dsched_calendar_add"


def inline(**rows: str) -> dict[str, str]:
    """The window inline's management form and one row."""
    data = {
        "windows-TOTAL_FORMS": "1",
        "windows-INITIAL_FORMS": "0",
        "windows-MIN_NUM_FORMS": "0",
        "windows-MAX_NUM_FORMS": "100",
    }
    data.update({f"windows-0-{name}": value for name, value in rows.items()})
    return data


def test_a_calendar_with_holidays_and_a_weekly_window_is_added(admin_client):
    form = {
        "name": "Belgium",
        "host_id": "00000000-0000-0000-0000-000000000000",
        "country": "BE",
        "first_year": "2026",
        "last_year": "2027",
        "added_dates": "2026-12-24",
        "weekend_days": "5,6",
        **inline(
            kind="WEEKLY", label="weekend freeze", start_day="4", start_time="18:00",
            end_day="0", end_time="06:00", time_zone="Europe/Brussels",
        ),
    }  # fmt: skip
    response = admin_client.post(reverse(ADD), form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    calendar = Calendar.objects.get()
    assert ["2026-12-25", "Christmas Day"] in calendar.holidays
    assert CalendarWindow.objects.get().planning().describe() == (
        "weekend freeze (Friday 18:00 to Monday 06:00 Europe/Brussels)"
    )
    assert calendar.version >= 2  # its window made a new version for the next plans
    page = admin_client.get(reverse("admin:dsched_calendar_change", args=[calendar.pk]))
    assert "Christmas Day" in page.content.decode()

    refused = admin_client.post(reverse(ADD), {**form, "name": "x", "country": "XX"})
    assert refused.context["adminform"].form.errors["country"] == [
        "no holidays are known for 'XX': Country XX not available"
    ]


def test_staff_of_a_tenant_use_theirs_and_the_operators_and_change_theirs(client, settings):
    settings.DSCHED_ADMIN_HOST_RESOLVER = "tests.admin.test_calendars.supported_hosts"
    shared = api.create_calendar("Shared")
    ours = api.create_calendar("Ours", host_id=HOST_A)
    theirs = api.create_calendar("Theirs", host_id=HOST_B)
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="dsched",
            codename__in=[
                "view_calendar",
                "change_calendar",
                "delete_calendar",
                "add_schedule",
                "view_schedule",
            ],
        )
    )
    client.force_login(user)

    listed = client.get(reverse("admin:dsched_calendar_changelist")).content.decode()
    assert "Shared" in listed and "Ours" in listed and "Theirs" not in listed
    change = "admin:dsched_calendar_change"
    assert client.get(reverse(change, args=[theirs.pk])).status_code == 302  # not found
    page = client.get(reverse(change, args=[shared.pk])).content.decode()
    assert 'name="name"' not in page  # read-only to a tenant
    assert 'name="name"' in client.get(reverse(change, args=[ours.pk])).content.decode()

    form = client.get(reverse("admin:dsched_schedule_add")).context["adminform"].form
    choices = {label for _value, label in form.fields["calendar_ids"].choices}
    assert {"Shared (00000000-0000-0000-0000-000000000000)", f"Ours ({HOST_A})"} == choices

    api.create_interval("uses-it", every=1, calendars=[ours], host_id=HOST_A,
                        topic="t", event_type="x")  # fmt: skip
    delete = client.get(reverse("admin:dsched_calendar_delete", args=[ours.pk]))
    assert delete.status_code == 403  # in use: no delete
    assert Calendar.objects.filter(pk=ours.pk).exists()


def supported_hosts(request):
    return [HOST_A]


def test_the_schedule_form_refuses_another_tenants_calendar(admin_client):
    theirs = api.create_calendar("Theirs", host_id=HOST_B)
    form = add_form(database_now(), misfire_policy="COALESCE", calendar_ids=str(theirs.pk))
    response = admin_client.post(reverse("admin:dsched_schedule_add"), form)
    errors = response.context["adminform"].form.errors
    assert errors["calendar_ids"] == [f"No calendar {theirs.pk} that this schedule's host may use."]
