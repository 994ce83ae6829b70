"""RRULE schedules and calendars at every door: the model, the Python API (single and
bulk), declarations, REST (single, bulk, edits), the admin's form and the ``dsched``
command. Each accepts a good rule and refuses a bad one with the same message; calendars
are the host's own or the operator's; previews show what calendars move or drop."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from django_dsched import api, declared
from django_dsched.exceptions import BulkValidationError, RecurrenceError, ValidationError
from django_dsched.models import Calendar, Schedule
from django_dsched.runtime.clock import database_now
from django_dsched.timetables import check_recurrence
from tests.admin.test_permissions import add_form
from tests.rest.conftest import APIClient
from tests.rest.hosts import HOST_A, HOST_B

pytestmark = pytest.mark.django_db

COMMON = {"topic": "reports", "event_type": "report.build"}
GOOD = "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
BAD = "FREQ=DAILY;BYSECOND=60"
ZONE = "Europe/Brussels"
START = datetime(2026, 1, 6, 8, tzinfo=UTC)  # a Tuesday, 09:00 in Brussels


def message() -> str:
    """The one message every door gives for :data:`BAD`."""
    with pytest.raises(RecurrenceError) as refused:
        check_recurrence(BAD)
    return f"Invalid recurrence rule: {refused.value}."


def every_second_tuesday(after: datetime, count: int) -> list[datetime]:
    """09:00 Brussels on every second Tuesday from START, after ``after`` (by hand)."""
    found, day = [], date(2026, 1, 6)
    while len(found) < count:
        moment = datetime(day.year, day.month, day.day, 9, tzinfo=ZoneInfo(ZONE))
        if moment > after:
            found.append(moment.astimezone(UTC))
        day += timedelta(days=14)
    return found


def rest_body(rule: str, **more: object) -> dict[str, object]:
    return {
        "name": "fortnightly", "kind": "RRULE", "rrule": rule, "time_zone": ZONE,
        "start": START.isoformat(), **COMMON, **more,
    }  # fmt: skip


def test_the_model_and_the_python_api_accept_a_good_rule_and_refuse_a_bad_one():
    schedule = Schedule(
        schedule_name="m", schedule_kind="RRULE", rrule=BAD, time_zone=ZONE, start_ts=START,
        event_topic="reports", event_type="report.build",
    )  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        schedule.full_clean()
    assert refused.value.message_dict["rrule"] == [message()]
    with pytest.raises(ValidationError) as refused:
        api.create_rrule("bad", rrule=BAD, **COMMON)
    assert refused.value.message_dict == {"rrule": [message()]}
    with pytest.raises(BulkValidationError) as refused_many:
        api.bulk_create([api.Rrule(rrule=GOOD, **COMMON), api.Rrule(rrule=BAD, **COMMON)])
    assert refused_many.value.item_errors == [(1, "rrule", message())]
    with pytest.raises(ValidationError, match="needs a recurrence rule"):
        api.create_rrule("empty", rrule="", **COMMON)
    assert not Schedule.objects.exists()

    made = api.create_rrule("fortnightly", rrule=GOOD, time_zone=ZONE, start=START, **COMMON)
    assert api.preview(made, 3) == every_second_tuesday(START - timedelta(seconds=1), 3)
    made_too = api.bulk_create([api.Rrule(rrule=GOOD, time_zone=ZONE, start=START, **COMMON)])
    assert made_too[0].next_slot_ts == made.next_slot_ts


def test_declarations_accept_a_good_rule_and_refuse_a_bad_one():
    good = {"rrule": GOOD, "time_zone": ZONE, "start": START, **COMMON}
    assert declared.problem("fortnightly", good) is None
    assert declared.problem("bad", {**good, "rrule": BAD}) == message()
    with pytest.raises(ValidationError) as refused:
        declared.sync({"bad": {**good, "rrule": BAD}})
    assert refused.value.messages == [f"declared schedule 'bad': {message()}"]
    report = declared.sync({"fortnightly": good})
    assert report.created == ["fortnightly"]
    assert declared.sync({"fortnightly": good}).unchanged == ["fortnightly"]
    # Calendars by name: resolved to ids, so a sync of the same declaration changes nothing.
    ops = api.create_calendar("Ops", weekend=[6])
    with_calendars = {**good, "calendars": ["Ops"], "calendar_policy": "FORWARD"}
    assert declared.sync({"fortnightly": with_calendars}).updated == ["fortnightly"]
    assert declared.sync({"fortnightly": with_calendars}).unchanged == ["fortnightly"]
    assert Schedule.objects.get(schedule_name="fortnightly").calendar_ids == [ops.pk]
    with pytest.raises(ValidationError) as refused:
        declared.sync({"fortnightly": {**good, "calendars": ["Nope"]}})
    assert refused.value.messages == [
        "declared schedule 'fortnightly': No calendar 'Nope' that this schedule's host may use."
    ]


def test_rest_accepts_a_good_rule_and_refuses_a_bad_one_in_creates_bulk_and_edits(admin_user):
    client = APIClient(admin_user)
    refused = client.post("schedules/", rest_body(BAD))
    assert refused.status_code == 400 and refused.body["errors"] == {"rrule": [message()]}
    refused = client.post("schedules/bulk/", [rest_body(GOOD), rest_body(BAD, name="b")])
    assert refused.status_code == 400 and refused.body["errors"] == {"1.rrule": [message()]}
    created = client.post("schedules/", rest_body(GOOD))
    assert created.status_code == 201, created.body
    assert created.body["rrule"] == GOOD and created.body["kind"] == "RRULE"
    assert created.body["next_fires"] == [
        t.isoformat().replace("+00:00", "Z")
        for t in every_second_tuesday(START - timedelta(seconds=1), 5)
    ]
    path = f"schedules/{created.body['id']}/"
    edited = client.patch(path, {"rrule": BAD}, **{"If-Match": "*"})
    assert edited.status_code == 400 and edited.body["errors"] == {"rrule": [message()]}
    edited = client.patch(path, {"rrule": "FREQ=DAILY;BYHOUR=6"}, **{"If-Match": "*"})
    assert edited.status_code == 200 and edited.body["rrule"] == "FREQ=DAILY;BYHOUR=6"


def test_the_admin_form_accepts_a_good_rule_and_refuses_a_bad_one(admin_client):
    form = add_form(START, schedule_kind="RRULE", rrule=BAD, time_zone=ZONE)
    form.pop("frequency_time"), form.pop("frequency_unit")
    response = admin_client.post(reverse("admin:dsched_schedule_add"), form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["rrule"] == [message()]
    form["rrule"] = GOOD
    response = admin_client.post(reverse("admin:dsched_schedule_add"), form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    schedule = Schedule.objects.get()
    assert (schedule.schedule_kind, schedule.rrule) == ("RRULE", GOOD)


def test_calendars_are_the_hosts_own_or_the_operators(settings, admin_user):
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"
    shared = api.create_calendar("Belgium", country="BE", years=range(2026, 2028))
    theirs = api.create_calendar("B's", host_id=HOST_B)
    ours = api.create_calendar("A's", host_id=HOST_A, weekend=[])
    with pytest.raises(ValidationError) as refused:
        api.create_interval("x", every=1, calendars=[theirs], host_id=HOST_A, **COMMON)
    assert refused.value.message_dict == {
        "calendars": [f"No calendar {theirs.pk} that this schedule's host may use."]
    }
    made = api.create_interval("x", every=1, calendars=["Belgium", "A's"], host_id=HOST_A, **COMMON)
    assert made.calendar_ids == [shared.pk, ours.pk]

    alice = APIClient(User.objects.create_superuser("alice-a", "a@example.com", "pw"))
    body = {"name": "y", "kind": "CRON", "cron": "0 9 * * *", **COMMON}
    refused = alice.post("schedules/", {**body, "calendars": [str(theirs.pk)]})
    assert refused.status_code == 400
    assert refused.body["errors"] == {
        "calendars": [f"No calendar {theirs.pk} that this schedule's host may use."]
    }
    created = alice.post("schedules/", {**body, "calendars": [str(shared.pk)]})
    assert created.status_code == 201 and created.body["calendars"] == [str(shared.pk)]
    edit = {"calendars": [str(ours.pk)], "calendar_policy": "BACKWARD"}
    edited = alice.patch(f"schedules/{created.body['id']}/", edit, **{"If-Match": "*"})
    assert edited.status_code == 200, edited.body
    assert (edited.body["calendars"], edited.body["calendar_policy"]) == (
        [str(ours.pk)],
        "BACKWARD",
    )
    once = {"name": "z", "kind": "ONCE", "delay": 60, "calendars": [str(ours.pk)], **COMMON}
    refused = alice.post("schedules/", once)
    assert refused.status_code == 400
    assert refused.body["errors"] == {
        "calendars": ["A one-shot fires at its time: calendars filter recurring schedules."]
    }
    listed = alice.get("calendars/").body["results"]
    assert {(c["name"], c["shared"]) for c in listed} == {("Belgium", True), ("A's", False)}
    assert alice.patch(f"calendars/{shared.pk}/", {"weekend_days": []}).status_code == 403
    assert alice.get(f"calendars/{theirs.pk}/").status_code == 404
    in_use = alice.delete(f"calendars/{ours.pk}/")
    assert in_use.status_code == 409 and "x, y use this calendar" in in_use.body["detail"]
    assert Calendar.objects.filter(pk=ours.pk).exists()


def test_previews_show_what_calendars_move_and_drop(admin_client, admin_user):
    now = database_now()
    tomorrow = now.date() + timedelta(days=1)
    api.create_calendar("Ops", added=[tomorrow], weekend=[])
    daily = {"rrule": "FREQ=DAILY;BYHOUR=0;BYMINUTE=0;BYSECOND=0", "start": now, **COMMON}
    dropped = api.create_rrule("dropped", calendars=["Ops"], **daily)
    moved = api.create_rrule("moved", calendars=["Ops"], calendar_policy="FORWARD", **daily)
    midnight = datetime.combine(tomorrow, datetime.min.time(), UTC)
    day = timedelta(days=1)
    slots = api.preview_slots(dropped, 3)
    assert [(s.slot, s.fate) for s in slots] == [
        (midnight, "excluded"),
        (midnight + day, "fires"),
        (midnight + 2 * day, "fires"),
        (midnight + 3 * day, "fires"),
    ]
    assert slots[0].runs_at is None and slots[0].reason == "excluded by Ops (excluded date)"
    assert api.preview(dropped, 1) == [midnight + day]
    merged = api.preview_slots(moved, 2)  # tomorrow's moves onto the day after's: one fire
    assert [(s.slot, s.runs_at, s.fate) for s in merged] == [
        (midnight, midnight + day, "shifted"),
        (midnight + day, midnight + day, "fires"),
        (midnight + 2 * day, midnight + 2 * day, "fires"),
    ]
    assert api.preview(moved, 2) == [midnight + day, midnight + 2 * day]

    rest = APIClient(admin_user)
    answer = rest.get(f"schedules/{dropped.pk}/preview/", {"count": 1}).body
    assert answer["fires"] == [(midnight + day).isoformat().replace("+00:00", "Z")]
    assert [s["fate"] for s in answer["slots"]] == ["excluded", "fires"]
    assert answer["slots"][0]["reason"] == "excluded by Ops (excluded date)"
    answer = rest.get(f"schedules/{moved.pk}/preview/", {"count": 1}).body
    assert answer["fires"] == [(midnight + day).isoformat().replace("+00:00", "Z")]

    page = admin_client.get(reverse("admin:dsched_schedule_change", args=[dropped.pk]))
    assert "Moved or dropped by its calendars" in page.content.decode()
    assert "excluded by Ops (excluded date)" in page.content.decode()

    out = io.StringIO()
    call_command("dsched", "preview", "moved", "-n", "1", stdout=out)
    assert out.getvalue().splitlines() == [
        f"{(midnight + day).isoformat()}  shifted from {midnight.isoformat()} by Ops (excluded "
        "date)",
        (midnight + day).isoformat(),
    ]
    out = io.StringIO()
    call_command("dsched", "show", "dropped", stdout=out)
    assert "  calendars  Ops  (OMIT)" in out.getvalue()
    assert "FREQ=DAILY;BYHOUR=0;BYMINUTE=0;BYSECOND=0 (UTC), 1 calendar (OMIT)" in out.getvalue()
