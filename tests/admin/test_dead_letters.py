"""The outbox admin: filters, payload and errors, retry/discard of dead letters."""

from __future__ import annotations

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:dsched_outboxmessage_changelist"


def login(client, *perms, superuser=False):
    if superuser:
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    else:
        user = User.objects.create_user("staff", password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="dsched", codename__in=perms)
        )
    client.force_login(user)
    return client


@pytest.fixture
def dead_and_alive():
    dead = make_messages(2, topic="billing", status=DeliveryStatus.DELIVERY_FAILED)
    OutboxMessage.objects.filter(id__in=dead).update(
        attempts=10, last_error="HTTP 503 from https://hooks.example.com/<in>"
    )
    pending = make_messages(1, topic="reports")
    return dead, pending


def run_action(client, action, ids):
    return client.post(
        reverse(CHANGELIST),
        {"action": action, helpers.ACTION_CHECKBOX_NAME: [str(i) for i in ids]},
        follow=True,
    )


def test_changelist_filters_by_status_and_topic(client, dead_and_alive):
    login(client, superuser=True)
    response = client.get(
        reverse(CHANGELIST), {"status__exact": "DELIVERY_FAILED", "topic": "billing"}
    )
    assert response.status_code == 200
    assert response.context["cl"].result_count == 2


def test_detail_shows_payload_and_escaped_error(client, dead_and_alive):
    login(client, superuser=True)
    dead, _ = dead_and_alive
    response = client.get(reverse("admin:dsched_outboxmessage_change", args=[dead[0]]))
    content = response.content.decode()
    assert response.status_code == 200
    assert "HTTP 503 from https://hooks.example.com/&lt;in&gt;" in content
    assert "specversion" in content and str(dead[0]) in content


def test_retry_requeues_only_dead_letters(client, dead_and_alive):
    login(client, superuser=True)
    dead, pending = dead_and_alive
    response = run_action(client, "retry_selected", dead + pending)
    content = response.content.decode()
    assert "2 dead letters queued for delivery again." in content
    assert "1 message was skipped: it is not a dead letter." in content
    for message in OutboxMessage.objects.filter(id__in=dead):
        assert message.status == DeliveryStatus.PENDING and message.attempts == 0
        assert message.next_attempt_ts is None and message.last_error.startswith("HTTP 503")


def test_discard_deletes_only_dead_letters(client, dead_and_alive):
    login(client, superuser=True)
    dead, pending = dead_and_alive
    response = run_action(client, "discard_selected", dead + pending)
    assert "2 dead letters discarded." in response.content.decode()
    assert list(OutboxMessage.objects.values_list("id", flat=True)) == pending


@pytest.mark.parametrize(
    ("perms", "visible"),
    [
        (("view_outboxmessage",), set()),
        (("view_outboxmessage", "retry_outboxmessage"), {"retry_selected"}),
        (("view_outboxmessage", "discard_outboxmessage"), {"discard_selected"}),
    ],
)
def test_actions_need_their_permission(client, dead_and_alive, perms, visible):
    login(client, *perms)
    dead, _ = dead_and_alive
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    form = response.context["action_form"]  # None when no action is allowed
    choices = {value for value, _ in form.fields["action"].choices} if form else set()
    assert choices - {""} == visible
    for action in {"retry_selected", "discard_selected"} - visible:
        run_action(client, action, dead)
        assert (
            OutboxMessage.objects.filter(id__in=dead, status=DeliveryStatus.DELIVERY_FAILED).count()
            == 2
        )


def test_actions_refuse_get_and_missing_csrf(client, dead_and_alive):
    from django.test import Client

    dead, _ = dead_and_alive
    csrf_client = login(Client(enforce_csrf_checks=True), superuser=True)
    response = csrf_client.post(
        reverse(CHANGELIST),
        {"action": "discard_selected", helpers.ACTION_CHECKBOX_NAME: [str(i) for i in dead]},
    )
    assert response.status_code == 403
    assert OutboxMessage.objects.filter(id__in=dead).count() == 2
