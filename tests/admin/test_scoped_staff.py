"""Staff limited to tenants (DSCHED_ADMIN_HOST_RESOLVER): a staff user who supports host A
sees and touches host A's rows only, on every page of the dsched admin: the lists, their
filters and searches, the change pages, the actions (even with another tenant's ids posted
by hand), the outbox and its dead letters, the quotas, and the forms (no schedule or quota
created in, or moved to, another host)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission, User
from django.http import HttpRequest
from django.test import Client
from django.urls import reverse

from django_dsched import api
from django_dsched.enums import DeliveryStatus, ScheduleState
from django_dsched.models import Event, OutboxMessage, Schedule, TenantQuota
from tests.admin.test_admin import form_data
from tests.admin.test_pages import edit_data
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db

HOST_A = uuid.UUID("aaaaaaaa-0000-0000-0000-000000000000")
HOST_B = uuid.UUID("bbbbbbbb-0000-0000-0000-000000000000")
# Everything of host B a page could show, filters included.
OF_B = ("b-only-schedule", "beta-topic", "beta.type", str(HOST_B))


def supported_hosts(request: HttpRequest) -> list[uuid.UUID] | None:
    """The test's resolver: "sam" supports host A; everyone else sees every host."""
    return [HOST_A] if request.user.get_username() == "sam" else None


@pytest.fixture(autouse=True)
def resolver(settings: Any) -> None:
    settings.DSCHED_ADMIN_HOST_RESOLVER = "tests.admin.test_scoped_staff.supported_hosts"


@pytest.fixture
def rows() -> dict[str, Any]:
    """A schedule of each host, each fired once (an event and a dead letter), and a quota
    of each."""
    found: dict[str, Any] = {}
    for letter, host, name, topic, kind in (
        ("a", HOST_A, "a-only-schedule", "alpha-topic", "alpha.type"),
        ("b", HOST_B, "b-only-schedule", "beta-topic", "beta.type"),
    ):
        schedule = ScheduleFactory(
            schedule_name=name, host_id=host, event_topic=topic, event_type=kind
        )
        api.trigger(schedule)
        OutboxMessage.objects.filter(host_id=host).update(status=DeliveryStatus.DELIVERY_FAILED)
        found[letter] = schedule
        found[f"{letter}_event"] = Event.objects.get(host_id=host, scheduled_ts__isnull=False)
        found[f"{letter}_message"] = OutboxMessage.objects.get(host_id=host)
        found[f"{letter}_quota"] = TenantQuota.objects.create(host_id=host, max_fires_per_second=5)
    return found


@pytest.fixture
def sam(client: Client) -> Client:
    """Staff with every dsched permission, supporting host A."""
    user = User.objects.create_user("sam", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="dsched"))
    client.force_login(user)
    return client


def state(host: uuid.UUID = HOST_B) -> tuple[Any, ...]:
    """Everything of ``host`` an action could change."""
    return (
        sorted(
            Schedule.objects.filter(host_id=host).values_list(
                "schedule_name", "state", "aggregate_version"
            )
        ),
        Event.objects.filter(host_id=host).count(),
        sorted(OutboxMessage.objects.filter(host_id=host).values_list("id", "status")),
        list(TenantQuota.objects.filter(host_id=host).values_list("max_fires_per_second")),
    )


def page(client: Client, name: str, *args: Any, **params: Any) -> str:
    response = client.get(reverse(f"admin:dsched_{name}", args=args), params)
    assert response.status_code == 200, (name, response.status_code)
    return response.content.decode()


LISTS = ["schedule_changelist", "event_changelist", "outboxmessage_changelist"]


@pytest.mark.parametrize("name", [*LISTS, "tenantquota_changelist"])
def test_the_lists_and_their_filters_show_the_users_tenants_only(sam, rows, name):
    content = page(sam, name)
    assert [shown for shown in OF_B if shown in content] == []
    if name != "tenantquota_changelist":
        assert "a-only-schedule" in content or "alpha" in content
    else:
        assert str(HOST_A) in content


@pytest.mark.parametrize(
    "name, params",
    [
        ("schedule_changelist", {"q": "b-only-schedule"}),
        ("schedule_changelist", {"host_id": str(HOST_B)}),
        ("schedule_changelist", {"event_topic": "beta-topic"}),
        ("event_changelist", {"q": "beta"}),
        ("outboxmessage_changelist", {"topic": "beta-topic"}),
        ("outboxmessage_changelist", {"status__exact": "DELIVERY_FAILED"}),
    ],
)
def test_a_search_or_filter_for_another_tenants_rows_finds_none(sam, rows, name, params):
    response = sam.get(reverse(f"admin:dsched_{name}"), params)
    assert response.status_code == 200
    shown = list(response.context["cl"].result_list)
    assert all(row.host_id == HOST_A for row in shown), shown
    if "status__exact" in params:
        assert [row.pk for row in shown] == [rows["a_message"].pk]  # their dead letter


@pytest.mark.parametrize(
    "name, key",
    [
        ("schedule_change", "b"),
        ("schedule_history", "b"),
        ("event_change", "b_event"),
        ("outboxmessage_change", "b_message"),
        ("tenantquota_change", "b_quota"),
    ],
)
def test_another_tenants_page_does_not_exist_for_them(sam, rows, name, key):
    theirs = sam.get(reverse(f"admin:dsched_{name}", args=[rows[key].pk]))
    missing = sam.get(reverse(f"admin:dsched_{name}", args=[uuid.uuid4()]))
    assert theirs.status_code == missing.status_code == 302  # "does not exist", as Django says
    assert theirs["Location"] == missing["Location"]
    mine = rows[key.replace("b", "a", 1)]
    page(sam, name, mine.pk)


@pytest.mark.parametrize("action", ["pause", "run_now", "cancel", "duplicate"])
def test_actions_posted_with_another_tenants_ids_touch_nothing(sam, rows, action):
    before = state()
    sam.post(
        reverse("admin:dsched_schedule_changelist"),
        {
            "action": f"{action}_selected",
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(rows["b"].pk)],
        },
    )
    button = sam.post(reverse("admin:dsched_schedule_do", args=[rows["b"].pk, action]), {})
    assert button.status_code == 302 and "/do/" not in button["Location"]
    assert state() == before
    # Their own schedule, selected with the other's, is acted on.
    theirs = state(HOST_A)
    sam.post(
        reverse("admin:dsched_schedule_changelist"),
        {
            "action": f"{action}_selected",
            "post": "yes",
            helpers.ACTION_CHECKBOX_NAME: [str(rows["a"].pk), str(rows["b"].pk)],
        },
    )
    assert state() == before
    assert state(HOST_A) != theirs


def test_resume_posted_with_another_tenants_id_touches_nothing(sam, rows):
    api.pause(rows["b"])
    before = state()
    sam.post(
        reverse("admin:dsched_schedule_changelist"),
        {"action": "resume_selected", helpers.ACTION_CHECKBOX_NAME: [str(rows["b"].pk)]},
    )
    sam.post(reverse("admin:dsched_schedule_do", args=[rows["b"].pk, "resume"]), {})
    assert state() == before
    assert Schedule.objects.get(pk=rows["b"].pk).state == ScheduleState.PAUSED


@pytest.mark.parametrize("action", ["retry_selected", "discard_selected"])
def test_dead_letter_actions_posted_with_another_tenants_ids_touch_nothing(sam, rows, action):
    before = state()
    sam.post(
        reverse("admin:dsched_outboxmessage_changelist"),
        {
            "action": action,
            helpers.ACTION_CHECKBOX_NAME: [str(rows["a_message"].pk), str(rows["b_message"].pk)],
        },
    )
    assert state() == before
    assert state(HOST_A)[2] != [(rows["a_message"].pk, DeliveryStatus.DELIVERY_FAILED)]


def test_a_schedule_is_created_in_and_moved_to_their_tenants_only(sam, rows):
    add = reverse("admin:dsched_schedule_add")
    assert str(HOST_B) not in page(sam, "schedule_add")
    assert f'value="{HOST_A}"' in page(sam, "schedule_add")  # their host, offered first
    fields = {
        "schedule_name": "new-one",
        "frequency_time": "5",
        "frequency_unit": "MINUTES",
        "start_ts_0": "2026-01-01",
        "start_ts_1": "00:00:00",
        "event_topic": "alpha-topic",
        "event_type": "alpha.type",
    }
    refused = sam.post(add, form_data(host_id=str(HOST_B), **fields))
    assert refused.status_code == 200 and "not one of the tenants you support" in (
        refused.content.decode()
    )
    assert not Schedule.objects.filter(schedule_name="new-one").exists()
    assert sam.post(add, form_data(host_id=str(HOST_A), **fields)).status_code == 302
    assert Schedule.objects.get(schedule_name="new-one").host_id == HOST_A

    mine = rows["a"]
    moved = sam.post(
        reverse("admin:dsched_schedule_change", args=[mine.pk]),
        edit_data(mine, host_id=str(HOST_B)),
    )
    assert moved.status_code == 200 and "not one of the tenants you support" in (
        moved.content.decode()
    )
    assert Schedule.objects.get(pk=mine.pk).host_id == HOST_A


def test_a_quota_is_added_for_their_tenants_only(sam, rows):
    TenantQuota.objects.filter(host_id=HOST_A).delete()
    add = reverse("admin:dsched_tenantquota_add")
    fields = {"max_active_schedules": "7", "max_fires_per_second": ""}
    refused = sam.post(add, {"host_id": str(uuid.UUID(int=99)), **fields})
    assert "not one of the tenants you support" in refused.content.decode()
    before = state()
    changed = sam.post(
        reverse("admin:dsched_tenantquota_change", args=[rows["b_quota"].pk]),
        {"max_active_schedules": "1", "max_fires_per_second": "1"},
    )
    assert changed.status_code == 302 and state() == before
    assert sam.post(add, {"host_id": str(HOST_A), **fields}).status_code == 302
    assert TenantQuota.objects.get(host_id=HOST_A).max_active_schedules == 7


def test_a_user_the_resolver_gives_every_host_sees_every_host(client, rows):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    content = page(client, "schedule_changelist")
    assert all(shown in content for shown in ("a-only-schedule", "b-only-schedule", "beta-topic"))
