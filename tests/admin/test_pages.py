"""The schedule's page (preview, history, the concurrent-edit rule), the change list's
columns, the event list, and escaping of stored text (RELIABILITY S-08)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched import api
from django_dsched.changes import cancels, edits, on_demand, pauses
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.runtime.clock import database_now
from tests.admin.test_admin import form_data
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def change_url(schedule):
    return reverse("admin:dsched_schedule_change", args=[schedule.pk])


def edit_data(schedule, **values):
    """The form as the page showed it (its seen_version included), with ``values`` typed in."""
    # As a browser posts it: times to the second, hidden initials of callable defaults.
    shown = {
        "initial-host_id": str(schedule.host_id),
        "initial-event_data": '{"format": "pdf"}',
        "schedule_name": schedule.schedule_name,
        "frequency_time": str(schedule.frequency_time),
        "frequency_unit": schedule.frequency_unit,
        "start_ts_0": schedule.start_ts.strftime("%Y-%m-%d"),
        "start_ts_1": schedule.start_ts.strftime("%H:%M:%S"),
        "event_topic": schedule.event_topic,
        "event_type": schedule.event_type,
        "event_data": '{"format": "pdf"}',
        "seen_version": str(schedule.aggregate_version),
    }
    return form_data(**{**shown, **values})


# -- the concurrent-edit rule -----------------------------------------------------------
def opened(client, schedule):
    response = client.get(change_url(schedule))
    seen = response.context["adminform"].form.fields["seen_version"].initial
    assert seen == schedule.aggregate_version
    return seen


@pytest.mark.parametrize("meanwhile", ["fired", "edited", "paused", "cancelled"])
def test_a_form_opened_before_a_newer_state_does_not_overwrite_it(admin_client, meanwhile):
    schedule = ScheduleFactory(schedule_name="old", frequency_time=5)
    opened(admin_client, schedule)
    if meanwhile == "fired":
        on_demand.trigger(schedule, actor="scheduler")
    elif meanwhile == "edited":
        other = Schedule.objects.get(pk=schedule.pk)
        other.frequency_time = 7
        edits.save_schedule(other, ["frequency_time"], actor="bob")
    elif meanwhile == "paused":
        pauses.pause(Schedule.objects.filter(pk=schedule.pk), actor="bob")
    else:
        cancels.cancel(Schedule.objects.filter(pk=schedule.pk), actor="bob")
    newer = Schedule.objects.get(pk=schedule.pk)

    response = admin_client.post(change_url(schedule), edit_data(schedule, schedule_name="mine"))
    if meanwhile == "cancelled":
        assert response.status_code == 403  # a cancelled schedule is read-only now
    else:
        assert response.status_code == 200
        content = response.content.decode()
        assert "This schedule changed since you opened it" in content
        assert f"version {schedule.aggregate_version} is now {newer.aggregate_version}" in content
        assert "Your changes were not saved" in content
    after = Schedule.objects.get(pk=schedule.pk)
    assert (after.schedule_name, after.frequency_time, after.state) == (
        "old",
        newer.frequency_time,
        newer.state,
    )
    assert after.aggregate_version == newer.aggregate_version
    assert not LogEntry.objects.exists()


def test_a_form_saved_over_the_version_it_showed_is_saved(admin_client):
    schedule = ScheduleFactory(schedule_name="old")
    opened(admin_client, schedule)
    response = admin_client.post(change_url(schedule), edit_data(schedule, schedule_name="new"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.schedule_name == "new"
    assert LogEntry.objects.get().get_change_message() == "Changed Name."
    edited = Event.objects.get(event_type="dsched.schedule.edited")
    assert edited.payload["changes"] == {"schedule_name": ["old", "new"]}
    assert edited.metadata["actor"] == "root"


def test_validation_errors_are_clear_and_next_to_their_fields(admin_client):
    response = admin_client.post(
        reverse("admin:dsched_schedule_add"),
        form_data(
            schedule_name="cron",
            schedule_kind="CRON",
            cron_expression="61 * * * *",
            time_zone="Mars/Olympus",
            event_topic="ops",
            event_type="x",
        ),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) >= {"cron_expression", "time_zone"}
    assert "Traceback" not in response.content.decode()
    assert not Schedule.objects.exists()


# -- preview and history ----------------------------------------------------------------
def test_the_page_previews_the_next_fires_by_the_schedulers_code(admin_client):
    schedule = ScheduleFactory(
        schedule_kind="CRON", cron_expression="0 9 * * 1-5", time_zone="Europe/Brussels"
    )
    response = admin_client.get(change_url(schedule))
    content = response.content.decode()
    expected = schedule.upcoming(10)
    assert len(response.context["dsched_preview"]) == 10
    for moment in expected:
        assert f'datetime="{moment.isoformat()}"' in content
    assert "At 09:00, Monday through Friday (Europe/Brussels)" in content


def test_a_paused_schedule_previews_from_now_and_a_cancelled_one_has_none(admin_client, db_now):
    paused = ScheduleFactory(paused=True, start_ts=db_now() - timedelta(hours=3))
    response = admin_client.get(change_url(paused))
    assert len(response.context["dsched_preview"]) == 10
    first = response.context["dsched_preview"][0]
    assert str(db_now().year) in first
    assert "ago" not in first
    cancelled = ScheduleFactory(cancelled=True)
    response = admin_client.get(change_url(cancelled))
    assert response.context["dsched_preview"] == []
    assert "will not fire again" in response.content.decode()


def test_recent_events_and_deliveries_page_back_by_version(admin_client):
    schedule = ScheduleFactory()
    for _ in range(24):
        on_demand.trigger(schedule)
    OutboxMessage.objects.filter(aggregate_id=schedule.pk, aggregate_version=3).update(
        status=DeliveryStatus.DELIVERY_FAILED, last_error="<i>boom</i>"
    )
    response = admin_client.get(change_url(schedule))
    events = response.context["dsched_events"]
    assert [r["obj"].aggregate_version for r in events.rows] == list(range(25, 15, -1))
    assert events.newer_url is None
    response = admin_client.get(events.older_url)
    events = response.context["dsched_events"]
    assert [r["obj"].aggregate_version for r in events.rows] == list(range(15, 5, -1))
    response = admin_client.get(events.older_url)
    events = response.context["dsched_events"]
    assert [r["obj"].aggregate_version for r in events.rows] == [5, 4, 3, 2]  # 1: no event
    assert events.older_url is None
    assert events.newer_url == change_url(schedule)

    deliveries = response.context["dsched_deliveries"]  # its own pager, still on page one
    assert [r["obj"].aggregate_version for r in deliveries.rows] == list(range(25, 15, -1))
    response = admin_client.get(change_url(schedule) + "?deliveries_before=4")
    deliveries = response.context["dsched_deliveries"]
    assert [r["obj"].aggregate_version for r in deliveries.rows] == [3, 2]
    assert "&lt;i&gt;boom&lt;/i&gt;" in response.content.decode()
    # Bad page numbers are ignored, never an error.
    assert admin_client.get(change_url(schedule) + "?events_before=x").status_code == 200


def test_a_schedule_declared_in_code_warns_that_sync_puts_it_back(admin_client):
    schedule = ScheduleFactory(origin="CODE")
    assert "declared in code" in admin_client.get(change_url(schedule)).content.decode()


# -- the change list --------------------------------------------------------------------
def test_the_list_shows_state_times_frequency_and_failures(admin_client):
    failing = ScheduleFactory(schedule_name="failing", frequency_time=15)
    on_demand.trigger(failing)
    on_demand.trigger(failing)
    OutboxMessage.objects.update(status=DeliveryStatus.DELIVERY_FAILED)
    ScheduleFactory(schedule_name="idle", paused=True, paused_reason="quarter close")
    response = admin_client.get(reverse("admin:dsched_schedule_changelist"))
    content = response.content.decode()
    assert "every 15 minutes" in content
    assert 'class="dsched-badge dsched-warn" title="quarter close">paused<' in content
    failed_url = (
        reverse("admin:dsched_outboxmessage_changelist")
        + f"?aggregate_id={failing.pk}&amp;status__exact=DELIVERY_FAILED"
    )
    assert f'href="{failed_url}" ' in content and ">2 dead</a>" in content
    # The link leads to the failed deliveries of that schedule, with their errors.
    followed = admin_client.get(failed_url.replace("&amp;", "&"))
    assert followed.context["cl"].result_count == 2
    failing.refresh_from_db()
    assert f'datetime="{failing.next_run_ts.isoformat()}"' in content


def test_the_list_shows_retrying_deliveries_one_click_from_their_errors(admin_client):
    """The deliveries column: messages that failed and will be tried again, and dead
    letters, each a link to those messages, whose list shows their last error."""
    flaky = ScheduleFactory(schedule_name="flaky")
    for _ in range(3):
        on_demand.trigger(flaky)
    OutboxMessage.objects.update(attempts=2, last_error="Timeout after 10 s")
    OutboxMessage.objects.filter(aggregate_version=4).update(
        status=DeliveryStatus.DELIVERY_FAILED, last_error="HTTP 503"
    )
    ScheduleFactory(schedule_name="quiet")
    content = admin_client.get(reverse("admin:dsched_schedule_changelist")).content.decode()
    assert ">2 retrying</a>" in content and ">1 dead</a>" in content
    retrying_url = (
        reverse("admin:dsched_outboxmessage_changelist") + f"?aggregate_id={flaky.pk}&retrying=yes"
    )
    assert f'href="{retrying_url.replace("&", "&amp;")}"' in content
    followed = admin_client.get(retrying_url)
    assert followed.context["cl"].result_count == 2
    assert "Timeout after 10 s" in followed.content.decode()


def test_a_list_of_many_hosts_shows_each_names_host(admin_client):
    ScheduleFactory(schedule_name="alpha")
    content = admin_client.get(reverse("admin:dsched_schedule_changelist")).content.decode()
    assert 'title="00000000-0000-0000-0000-000000000000"' not in content
    ScheduleFactory(schedule_name="bravo", host_id="00000000-0000-0000-0000-000000000001")
    content = admin_client.get(reverse("admin:dsched_schedule_changelist")).content.decode()
    assert '<code title="00000000-0000-0000-0000-000000000001">00000000</code>' in content


def test_the_add_form_shows_no_status_and_no_internal_values(admin_client):
    """It showed "<django.db.models.expressions.DatabaseDefault object at 0x...>" for
    Created and Updated."""
    content = admin_client.get(reverse("admin:dsched_schedule_add")).content.decode()
    assert "DatabaseDefault" not in content and "object at 0x" not in content
    assert "Status</h2>" not in content


# Django's default way of writing a time ("Nov. 27, 2026, 3:14 a.m.").
DJANGO_TIME = re.compile(r"[A-Z][a-z]{2}\.? \d{1,2}, \d{4}, \d{1,2}(:\d{2})? [ap]\.m\.")


@pytest.mark.parametrize("page", ["event", "outboxmessage", "lease", "schedule"])
def test_every_page_writes_times_one_way(admin_client, page):
    """The history lists showed Django's "Nov. 27, 2026, 3:14 a.m." where the other pages
    showed 2026-11-27 03:14:00 UTC (then the viewer's zone)."""
    from django_dsched.models import Lease

    schedule = ScheduleFactory(schedule_name="ticking")
    on_demand.trigger(schedule)
    Lease.objects.create(lease_id=1, instance_id="node-1", last_heartbeat=database_now())
    message = OutboxMessage.objects.get()
    urls = [reverse(f"admin:dsched_{page}_changelist")]
    if page in ("event", "outboxmessage", "schedule"):
        pk = schedule.pk if page == "schedule" else message.pk
        urls.append(reverse(f"admin:dsched_{page}_change", args=[pk]))
    for url in urls:
        content = admin_client.get(url).content.decode()
        assert not DJANGO_TIME.search(content), url
        # A schedule's own times are on its zone's clock (dsched-zoned), the rest in the
        # viewer's (data-dsched-local).
        assert re.search(
            r'<time datetime="[^"]+" (data-dsched-local|class="dsched-zoned")', content
        )


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"state__exact": "PAUSED"}, ["bravo"]),
        ({"event_topic": "billing"}, ["charlie"]),
        ({"event_type": "mail.send"}, ["bravo"]),
        ({"schedule_kind__exact": "CRON"}, ["charlie"]),
        ({"host_id": "00000000-0000-0000-0000-000000000001"}, ["charlie"]),
        ({"q": "billing"}, ["charlie"]),
        ({"q": "mail.send"}, ["bravo"]),
        ({"q": "alph"}, ["alpha"]),
    ],
)
def test_the_list_filters_and_searches(admin_client, params, names):
    ScheduleFactory(schedule_name="alpha")
    ScheduleFactory(schedule_name="bravo", event_type="mail.send", paused=True)
    ScheduleFactory(
        schedule_name="charlie",
        event_topic="billing",
        schedule_kind="CRON",
        cron_expression="0 * * * *",
        host_id="00000000-0000-0000-0000-000000000001",
    )
    response = admin_client.get(reverse("admin:dsched_schedule_changelist"), params)
    assert sorted(s.schedule_name for s in response.context["cl"].result_list) == names


def test_stored_markup_is_shown_as_text_everywhere(admin_client):
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    schedule = ScheduleFactory(
        schedule_name=evil, event_data={"x": evil}, paused=True, paused_reason=evil
    )
    on_demand.trigger(schedule)
    pages = [
        reverse("admin:dsched_schedule_changelist"),
        change_url(schedule),
        reverse("admin:dsched_schedule_do", args=[schedule.pk, "cancel"]),
        reverse("admin:dsched_event_changelist"),
        reverse(
            "admin:dsched_event_change",
            args=[Event.objects.filter(scheduled_ts__isnull=False).get().pk],
        ),
    ]
    for url in pages:
        content = admin_client.get(url).content.decode()
        assert "<script>alert(1)" not in content, url
        assert "<img src=x" not in content, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content, url


# -- events -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "expected"),
    [("fire", 2), ("manual", 2), ("backfill", 0), ("change", 1), ("", 3)],
)
def test_the_event_list_filters_fires_and_changes(admin_client, kind, expected):
    schedule = ScheduleFactory()
    on_demand.trigger(schedule)
    on_demand.trigger(schedule)
    pauses.pause(Schedule.objects.all())  # another change
    params = {"kind": kind} if kind else {}
    response = admin_client.get(reverse("admin:dsched_event_changelist"), params)
    assert response.context["cl"].result_count == expected
    assert (schedule.schedule_name in response.content.decode()) is bool(expected)


def test_an_event_page_links_to_its_schedule_and_shows_payload_and_metadata(admin_client):
    schedule = ScheduleFactory(event_data={"format": "pdf"})
    on_demand.trigger(schedule, actor="alice")
    event = Event.objects.get(scheduled_ts__isnull=False)
    content = admin_client.get(reverse("admin:dsched_event_change", args=[event.pk])).content
    content = content.decode()
    assert f'href="{change_url(schedule)}"' in content
    assert "&quot;format&quot;: &quot;pdf&quot;" in content
    assert "&quot;trigger&quot;: &quot;manual&quot;" in content
    assert ScheduleState.ACTIVE  # the schedule itself is unchanged by viewing


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/admin/dsched/outboxmessage/?topic=%00",
        "/admin/dsched/outboxmessage/?topic=a%00b",
        "/admin/dsched/schedule/?event_topic=%00",
        "/admin/dsched/schedule/?q=%00",
        "/admin/dsched/event/?q=a%00",
        "/admin/dsched/event/?event_type=%00",
    ],
)
def test_a_filter_value_the_database_cannot_hold_is_an_invalid_filter(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 302 and "e=1" in response.url  # the admin's "invalid filter"


def test_the_list_searches_the_idempotency_key_and_the_page_shows_it(admin_client):
    keyed = api.create_once(
        "reminder", key="order-42:reminder", delay=timedelta(hours=1), topic="mail", event_type="x"
    )
    api.create_once("other", key="order-4", delay=timedelta(hours=1), topic="mail", event_type="x")
    url = reverse("admin:dsched_schedule_changelist")
    response = admin_client.get(url, {"q": "order-42:reminder"})
    assert [s.pk for s in response.context["cl"].result_list] == [keyed.pk]
    page = admin_client.get(reverse("admin:dsched_schedule_change", args=[keyed.pk]))
    assert page.status_code == 200
    assert "order-42:reminder" in page.content.decode()
    assert 'name="idempotency_key"' not in page.content.decode()  # shown, not editable
