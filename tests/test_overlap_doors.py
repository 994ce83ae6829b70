"""The overlap and failure policies at every door (docs/overlap.md): the Python API (creates,
bulk creates, set_policies), declarations, REST, the admin and ``dsched`` accept the same
values and refuse the same ones (an unknown policy; a policy on a one-shot), nothing
written when refused; an edit of the policy is audited and lets a held slot go."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from django_dsched import api
from django_dsched.declared import problem, sync
from django_dsched.enums import MisfirePolicy, OverlapPolicy
from django_dsched.exceptions import BulkValidationError, NotPermitted, ValidationError
from django_dsched.models import Event, Schedule
from tests.admin.test_form_validation import BASE
from tests.factories import ScheduleFactory
from tests.fire_path import fire
from tests.rest.conftest import INTERVAL, APIClient, user_with

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "reports", "event_type": "report.build"}
AT = datetime(2031, 1, 1, tzinfo=UTC)
ONE_SHOT = "A one-shot fires once: it has no overlap policy."
NOT_A_POLICY = "'QUEUE' is not one of ALLOW_ALL, SKIP, BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER."


@pytest.fixture
def root():
    return APIClient(User.objects.create_superuser("root", "root@example.com", "pw"))


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    return client


def dsched(*args: str) -> str:
    out = StringIO()
    call_command("dsched", *args, stdout=out)
    return out.getvalue()


# -- the Python API ------------------------------------------------------------------------
def test_the_python_api_takes_both_options_and_refuses_what_every_door_refuses():
    schedule = api.create_interval(
        "nightly", every=1, overlap_policy="BUFFER_ONE", pause_on_failure=True, **COMMON
    )
    assert (schedule.overlap_policy, schedule.pause_on_failure) == ("BUFFER_ONE", True)
    created = Event.objects.get(aggregate_id=schedule.pk, event_type="dsched.schedule.created")
    assert created.payload["definition"]["overlap_policy"] == "BUFFER_ONE"
    assert created.payload["definition"]["pause_on_failure"] is True
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=1, overlap_policy="QUEUE", **COMMON)
    assert refused.value.message_dict == {"overlap_policy": [NOT_A_POLICY]}
    with pytest.raises(ValidationError) as refused:
        api.create_once("once", at=AT, overlap_policy="SKIP", **COMMON)
    assert refused.value.message_dict == {"overlap_policy": [ONE_SHOT]}
    assert api.create_once("once", at=AT, pause_on_failure=True, **COMMON).pause_on_failure
    assert Schedule.objects.count() == 2


def test_a_bulk_create_refuses_the_item_and_writes_nothing():
    with pytest.raises(BulkValidationError) as refused:
        api.bulk_create(
            [
                api.Interval(every=1, overlap_policy="SKIP", **COMMON),
                api.Once(at=AT, overlap_policy="BUFFER_ALL", **COMMON),
            ]
        )
    assert refused.value.item_errors == [(1, "overlap_policy", ONE_SHOT)]
    assert not Schedule.objects.exists()
    [made] = api.bulk_create([api.Interval(every=1, overlap_policy="SKIP", **COMMON)])
    assert Schedule.objects.get(pk=made.pk).overlap_policy == "SKIP"


def test_set_policies_is_an_audited_edit_that_lets_a_held_slot_go(fence, db_now):
    start = db_now().replace(second=0, microsecond=0) - timedelta(hours=1)
    schedule = ScheduleFactory(
        start_ts=start, misfire_policy=MisfirePolicy.CATCH_UP, overlap_policy="BUFFER_ONE"
    )
    fire(fence)
    assert fire(fence).buffered == 1
    api.set_policies(schedule.schedule_name, overlap_policy="SKIP", actor="ops")
    schedule.refresh_from_db()
    assert (schedule.overlap_policy, schedule.held_by) == ("SKIP", None)
    edited = Event.objects.filter(aggregate_id=schedule.pk, event_type="dsched.schedule.edited")
    assert edited.get().payload["changes"]["overlap_policy"] == ["BUFFER_ONE", "SKIP"]
    assert fire(fence).skipped == 1  # the first run still goes: SKIP now
    with pytest.raises(ValidationError) as refused:
        api.set_policies(schedule.schedule_name, overlap_policy="NEVER")
    assert "overlap_policy" in refused.value.message_dict
    once = api.create_once("once", at=AT, **COMMON)
    with pytest.raises(ValidationError) as refused:
        api.set_policies(once, overlap_policy="SKIP")
    assert refused.value.message_dict == {"overlap_policy": [ONE_SHOT]}
    viewer = user_with(["view_schedule"], name="viewer")
    with pytest.raises(NotPermitted):
        api.set_policies(schedule.schedule_name, pause_on_failure=True, actor=viewer)
    assert api.status(schedule.schedule_name).overlap_policy == "SKIP"


# -- declarations --------------------------------------------------------------------------
def test_declarations_take_both_options_and_say_what_they_refuse():
    nightly = {"cron": "0 2 * * *", "overlap_policy": "SKIP", "pause_on_failure": True, **COMMON}
    assert problem("nightly", nightly) is None
    assert problem("bad", {**nightly, "overlap_policy": "QUEUE"}) == NOT_A_POLICY
    once = {"at": AT, "overlap_policy": "SKIP", **COMMON}
    assert problem("once", once) == ONE_SHOT
    report = sync({"nightly": nightly})
    assert report.created == ["nightly"]
    stored = Schedule.objects.get(schedule_name="nightly")
    assert (stored.overlap_policy, stored.pause_on_failure) == ("SKIP", True)
    assert sync({"nightly": {**nightly, "overlap_policy": "BUFFER_ALL"}}).updated == ["nightly"]
    assert Schedule.objects.get(schedule_name="nightly").overlap_policy == "BUFFER_ALL"
    with pytest.raises(ValidationError, match="no overlap policy"):
        sync({"nightly": nightly, "once": once})


# -- REST ----------------------------------------------------------------------------------
def test_rest_reads_and_writes_both_and_refuses_what_the_python_api_refuses(root):
    created = root.post("schedules/", {**INTERVAL, "overlap_policy": "BUFFER_ALL"})
    assert created.status_code == 201, created.body
    body = created.body
    assert (body["overlap_policy"], body["pause_on_failure"]) == ("BUFFER_ALL", False)
    assert (body["skip_count"], body["buffer_count"], body["held_for"]) == (0, 0, None)
    path = f"schedules/{body['id']}/"
    changed = root.patch(path, {"pause_on_failure": True}, **{"If-Match": created["ETag"]})
    assert changed.status_code == 200 and changed.body["pause_on_failure"] is True
    for bad, field, fragment in (
        ({"overlap_policy": "QUEUE"}, "overlap_policy", NOT_A_POLICY),
        ({"pause_on_failure": "yes"}, "pause_on_failure", "valid boolean"),
        ({"overlap_policy": None}, "overlap_policy", "may not be null"),
    ):
        refused = root.post("schedules/", {**INTERVAL, "name": "bad", **bad})
        assert refused.status_code == 400
        assert fragment in " ".join(refused.body["errors"][field]), refused.body
    once = {"name": "once", "kind": "ONCE", "at": "2031-01-01T00:00:00Z", "topic": "t"}
    refused = root.post("schedules/", {**once, "event_type": "e", "overlap_policy": "SKIP"})
    assert refused.status_code == 400
    assert refused.body["errors"] == {"overlap_policy": [ONE_SHOT]}
    assert Schedule.objects.count() == 1
    # PUT replaces the definition: the policies left out take their defaults.
    current = root.get(path)
    replaced = root.put(path, INTERVAL, **{"If-Match": current["ETag"]})
    assert replaced.status_code == 200
    assert (replaced.body["overlap_policy"], replaced.body["pause_on_failure"]) == (
        "ALLOW_ALL",
        False,
    )


def test_rest_status_by_key_gives_the_policies_and_what_they_did(root):
    api.create_interval("keyed", every=1, key="k-1", overlap_policy="SKIP", **COMMON)
    Schedule.objects.filter(schedule_name="keyed").update(skip_count=3, buffer_count=2)
    body = root.get("schedules/status/", {"key": "k-1"}).body
    assert (body["overlap_policy"], body["skip_count"], body["buffer_count"]) == ("SKIP", 3, 2)
    assert body["held_for"] is None and body["pause_on_failure"] is False


# -- the admin -----------------------------------------------------------------------------
ADD = {**BASE, "schedule_kind": "INTERVAL", "frequency_time": "1", "frequency_unit": "MINUTES"}


def test_the_admins_form_takes_both_and_refuses_a_one_shots_policy(admin_client):
    url = reverse("admin:dsched_schedule_add")
    response = admin_client.post(url, {**ADD, "overlap_policy": "QUEUE"})
    assert "overlap_policy" in response.context["adminform"].form.errors
    once = {
        **ADD,
        "schedule_kind": "ONCE",
        "start_ts_0": "2031-01-01",
        "start_ts_1": "00:00:00",
        "overlap_policy": "SKIP",
    }
    response = admin_client.post(url, once)
    assert response.context["adminform"].form.errors["overlap_policy"] == [ONE_SHOT]
    assert not Schedule.objects.exists()
    response = admin_client.post(
        url, {**ADD, "overlap_policy": "CANCEL_OTHER", "pause_on_failure": "on"}
    )
    assert response.status_code == 302
    saved = Schedule.objects.get()
    assert (saved.overlap_policy, saved.pause_on_failure) == ("CANCEL_OTHER", True)


def test_the_admins_preview_shows_the_held_slot_and_the_ones_it_skips(admin_client, fence, db_now):
    start = db_now().replace(second=0, microsecond=0) - timedelta(minutes=5)
    schedule = ScheduleFactory(
        start_ts=start, misfire_policy=MisfirePolicy.CATCH_UP, overlap_policy="BUFFER_ONE"
    )
    fire(fence)
    assert fire(fence).buffered == 1
    schedule.refresh_from_db()
    response = admin_client.get(reverse("admin:dsched_schedule_change", args=[schedule.pk]))
    notes = [note for _when, note in response.context["dsched_preview"]]
    held = str(schedule.held_by)[:8]
    assert notes[0] == f"held until run {held} ends"
    assert notes[1:4] == ["skipped: a slot is already held"] * 3
    assert notes[-1] == ""  # ahead: it fires (nothing is known of a run then)
    assert f"held until run {held} ends" in response.content.decode()
    skip = ScheduleFactory(start_ts=db_now() + timedelta(minutes=1), overlap_policy="SKIP")
    api.trigger(skip)  # a run now: pending, still going
    response = admin_client.get(reverse("admin:dsched_schedule_change", args=[skip.pk]))
    notes = [note for _when, note in response.context["dsched_preview"]]
    assert notes[0].startswith("skipped if run ") and notes[0].endswith(" is still going then")
    assert notes[1:] == [""] * 9


# -- dsched --------------------------------------------------------------------------------
def test_dsched_sets_shows_and_previews_the_policies(db_now):
    api.create_interval("nightly", every=1, **COMMON)
    out = dsched("policy", "nightly", "--overlap", "SKIP", "--pause-on-failure")
    assert out.strip() == "nightly: overlap SKIP, pause on failure."
    shown = dsched("show", "nightly")
    assert "overlap    SKIP" in shown and "on failure pause" in shown
    assert "skipped    0" in shown and "held for   -" in shown
    assert (
        dsched("policy", "nightly", "--no-pause-on-failure").strip().endswith("go on on failure.")
    )
    api.trigger("nightly")  # a run now, still going: the next fire meets it
    first = dsched("preview", "nightly", "-n", "2").splitlines()[0]  # due now: skipped
    assert first.endswith("is still going") and "  skipped: run " in first
    with pytest.raises(CommandError, match="invalid choice: 'QUEUE'"):
        dsched("policy", "nightly", "--overlap", "QUEUE")
    with pytest.raises(CommandError, match="Give --overlap"):
        dsched("policy", "nightly")
    api.create_once("once", at=AT, **COMMON)
    with pytest.raises(CommandError, match="no overlap policy"):
        dsched("policy", "once", "--overlap", "BUFFER_ONE")
    User.objects.create_user("viewer")
    with pytest.raises(CommandError, match="edit schedules"):
        dsched("--user", "viewer", "policy", "nightly", "--overlap", "BUFFER_ALL")
    assert Schedule.objects.get(schedule_name="nightly").overlap_policy == "SKIP"
    assert Schedule.objects.get(schedule_name="once").overlap_policy == "ALLOW_ALL"


def test_no_door_leaves_a_held_slot_under_allow_all():
    """The CHECK keeps a held slot to a policy that holds, as its Python twin says."""
    schedule = api.create_interval("x", every=1, **COMMON)
    with pytest.raises(Exception, match="dsched_schedule_overlap_valid"):
        Schedule.objects.filter(pk=schedule.pk).update(held_by=uuid.uuid4())
    assert Schedule.objects.get().overlap_policy == OverlapPolicy.ALLOW_ALL
