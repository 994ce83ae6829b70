"""The outbox admin shows each message's run: derived status, phases and durations."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Event, OutboxMessage
from tests.factories import ScheduleFactory
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db


def set_phases(id_, *, picked: float, started: float | None, ended: float | None, ok: bool):
    """Phases at seconds after the message's fire."""
    sql(
        """UPDATE outbox_message_t SET
               picked_ts = event_ts + make_interval(secs => %(picked)s),
               started_ts = event_ts + make_interval(secs => %(started)s),
               completed_ts = CASE WHEN %(ok)s THEN event_ts + make_interval(secs => %(ended)s) END,
               failed_ts = CASE WHEN NOT %(ok)s THEN event_ts + make_interval(secs => %(ended)s) END
           WHERE id = %(id)s""",
        {"id": id_, "picked": picked, "started": started, "ended": ended, "ok": ok},
    )


@pytest.fixture
def admin_client_(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_change_page_shows_phases_durations_and_status(admin_client_):
    (done,) = make_messages(1, status=DeliveryStatus.DELIVERED)
    set_phases(done, picked=3, started=3.5, ended=45.5, ok=True)

    page = admin_client_.get(reverse("admin:dsched_outboxmessage_change", args=[done]))

    text = page.content.decode()
    assert page.status_code == 200
    for label in ("Picked", "Started", "Completed", "Failed", "Queue wait", "Run time"):
        assert label in text, label
    assert "succeeded" in text
    assert "3.0 s" in text  # queue wait: fire to pick
    assert "42 s" in text  # run time: start to completion


def test_changelist_shows_each_runs_status(admin_client_):
    (running,) = make_messages(1, topic="a", status=DeliveryStatus.DELIVERED)
    set_phases(running, picked=1, started=2, ended=None, ok=True)
    (failed,) = make_messages(1, topic="b", status=DeliveryStatus.DELIVERED)
    set_phases(failed, picked=1, started=2, ended=7, ok=False)
    make_messages(1, topic="c")

    page = admin_client_.get(reverse("admin:dsched_outboxmessage_changelist"))

    text = page.content.decode()
    assert page.status_code == 200
    assert 'dsched-warn">running<' in text
    assert 'dsched-bad">failed<' in text
    assert 'dsched-warn">pending<' in text
    assert "5.0 s" in text  # the failed run's time


def test_schedule_page_lists_each_deliverys_run(admin_client_):
    schedule = ScheduleFactory()
    (id_,) = make_messages(1, status=DeliveryStatus.DELIVERED)
    sql(
        "UPDATE outbox_message_t SET aggregate_id = %s WHERE id = %s",
        [schedule.schedule_id, id_],
    )
    set_phases(id_, picked=1, started=2, ended=14, ok=True)

    page = admin_client_.get(reverse("admin:dsched_schedule_change", args=[schedule.pk]))

    panel = page.content.decode().split('id="dsched-deliveries"')[1].split("</fieldset>")[0]
    assert 'dsched-ok">succeeded<' in panel
    assert "12 s" in panel


def test_change_page_of_a_fired_message_shows_the_events_payload(admin_client_):
    """A message has no payload of its own (it is stored once, in the event): the page shows
    the event's (its CloudEvent id and data)."""
    schedule = api.create_interval(
        "admin-payload",
        every=1,
        unit="HOURS",
        topic="reports",
        event_type="report.build",
        data={"marker": "shown-from-the-event"},
    )
    assert api.trigger(schedule) == 1
    message = OutboxMessage.objects.get()

    page = admin_client_.get(reverse("admin:dsched_outboxmessage_change", args=[message.pk]))

    assert page.status_code == 200
    (shown,) = re.findall(r'<pre class="dsched-json">(.*?)</pre>', page.content.decode(), re.S)
    payload = json.loads(html.unescape(shown))
    assert payload["id"] == str(message.pk)
    # The envelope the relay delivers, composed from the event (its data is the payload).
    assert Event.objects.get(pk=message.pk).payload == payload["data"]
    assert payload["data"] == {"marker": "shown-from-the-event"}
    assert payload["topic"] == "reports" and payload["type"] == "report.build"
