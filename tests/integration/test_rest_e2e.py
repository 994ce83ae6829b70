"""End to end over HTTP: a real HTTP client (httpx) creates, pauses, triggers, resumes and
cancels a schedule through the REST API on a live server, while a real ``run_scheduler``
process fires it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.helpers import sql, wait_for

pytestmark = pytest.mark.integration


def database_time(api: httpx.Client) -> datetime:
    """The database's clock, as the cluster endpoint reports it."""
    return datetime.fromisoformat(api.get("cluster/").json()["now"])


def fire_count(api: httpx.Client, schedule_id: str) -> int:
    count: int = api.get(f"schedules/{schedule_id}/").json()["fire_count"]
    return count


def leader_alive_until(api: httpx.Client, moment: datetime) -> bool:
    """The leader is live and the database's clock has passed ``moment``."""
    body = api.get("cluster/").json()
    leader = body["leader"]
    return bool(leader and leader["live"] and datetime.fromisoformat(body["now"]) > moment)


def test_a_schedule_driven_over_http_while_a_scheduler_fires_it(cluster, live_server):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    token = Token.objects.create(user=user)
    cluster.start("s1")
    with httpx.Client(
        base_url=f"{live_server.url}/api/dsched/",
        headers={"Authorization": f"Token {token.key}"},
        timeout=10,
    ) as api:
        response = api.post(
            "schedules/",
            json={
                "name": "heartbeat",
                "kind": "INTERVAL",
                "every": 1,
                "unit": "SECONDS",
                "topic": "ops",
                "event_type": "ping",
            },
        )
        assert response.status_code == 201, response.text
        schedule_id = response.json()["id"]

        wait_for(lambda: fire_count(api, schedule_id) >= 2, timeout=30, what="two fires")

        response = api.post(f"schedules/{schedule_id}/pause/", json={"reason": "e2e"})
        assert response.status_code == 200 and response.json()["state"] == "PAUSED"
        paused_at, fired = database_time(api), response.json()["fire_count"]
        # Two slots go by with the leader alive: a paused schedule does not fire.
        wait_for(
            lambda: leader_alive_until(api, paused_at + timedelta(seconds=2.5)),
            timeout=30,
            what="the leader to live through two slots",
        )
        assert fire_count(api, schedule_id) == fired

        response = api.post(f"schedules/{schedule_id}/trigger/")
        assert response.status_code == 200 and response.json()["fired"] == 1
        assert response.json()["schedule"]["fire_count"] == fired + 1
        assert response.json()["schedule"]["state"] == "PAUSED"

        response = api.post(f"schedules/{schedule_id}/resume/", json={"catch_up": False})
        assert response.status_code == 200
        wait_for(lambda: fire_count(api, schedule_id) >= fired + 3, timeout=30, what="fires again")

        cancelled = cancel_with_current_version(api, schedule_id)
        assert cancelled["state"] == "CANCELLED"
        cancelled_at = database_time(api)
        wait_for(
            lambda: leader_alive_until(api, cancelled_at + timedelta(seconds=2.5)),
            timeout=30,
            what="the leader to live through two slots",
        )
        assert fire_count(api, schedule_id) == cancelled["fire_count"]

        history = events(api, schedule_id)
    changes = [e["type"].rsplit(".", 1)[1] for e in history if e["kind"] == "change"]
    assert changes == ["created", "paused", "resumed", "cancelled"]
    triggers = [e["trigger"] for e in history if e["kind"] == "fire"]
    assert triggers.count("manual") == 1 and triggers.count("schedule") >= 4
    assert [e["version"] for e in history] == list(range(1, len(history) + 1))
    # Once per slot, and every fire has its outbox message.
    assert sql(
        "SELECT count(*), count(DISTINCT scheduled_ts), count(o.id) FROM event_store_t e "
        "LEFT JOIN outbox_message_t o USING (id) WHERE scheduled_ts IS NOT NULL"
    ) == [(len(triggers), len(triggers), len(triggers))]


def cancel_with_current_version(api: httpx.Client, schedule_id: str) -> dict[str, Any]:
    """DELETE with If-Match; a fire in between is a 412 carrying the version to retry with."""
    etag = api.get(f"schedules/{schedule_id}/").headers["ETag"]
    for _ in range(20):
        response = api.delete(f"schedules/{schedule_id}/", headers={"If-Match": etag})
        if response.status_code == 200:
            body: dict[str, Any] = response.json()
            return body
        assert response.status_code == 412, response.text
        etag = f'"{response.json()["current"]["version"]}"'
        assert response.headers["ETag"] == etag
    raise AssertionError("the schedule kept changing under the cancel")


def events(api: httpx.Client, schedule_id: str) -> list[dict[str, Any]]:
    """The whole history, oldest first, by following the pages."""
    found: list[dict[str, Any]] = []
    url: str | None = f"schedules/{schedule_id}/events/?page_size=5"
    while url:
        body = api.get(url).json()
        found += body["results"]
        url = body["next"]
    return found[::-1]
