"""Clients of the REST API: a user with the given permissions, authenticated by a DRF token."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.authtoken.models import Token

API = "/api/dsched"


class APIClient:
    """The Django test client, speaking JSON with a token."""

    def __init__(self, user: User | None) -> None:
        self.user = user
        self.client = Client()
        self.headers: dict[str, str] = {}
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            self.headers["Authorization"] = f"Token {token.key}"

    def request(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        url = path if path.startswith("http") or path.startswith("/") else f"{API}/{path}"
        extra: dict[str, Any] = {"headers": {**self.headers, **headers}}
        if body is not None or method in ("POST", "PUT", "PATCH"):
            raw = "" if body is None else body
            extra["data"] = raw if isinstance(raw, str | bytes) else json.dumps(raw)
            extra["content_type"] = "application/json"
        response = getattr(self.client, method.lower())(url, **extra)
        try:
            response.body = json.loads(response.content) if response.content else None
        except ValueError:
            response.body = response.content  # not JSON: the assertions will show it
        return response

    def get(self, path: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
        if params:
            path = f"{path}?{urlencode(params)}"
        return self.request("GET", path, **headers)

    def post(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.request("POST", path, body, **headers)

    def put(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.request("PUT", path, body, **headers)

    def patch(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.request("PATCH", path, body, **headers)

    def delete(self, path: str, **headers: str) -> Any:
        return self.request("DELETE", path, **headers)


def user_with(codenames: Iterable[str], name: str = "user", **flags: Any) -> User:
    user = User.objects.create_user(name, password="pw", **flags)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="dsched", codename__in=list(codenames))
    )
    return user


@pytest.fixture
def api_as(db: None) -> Callable[..., APIClient]:
    """``api_as("add_schedule", ...)``: a client with those permissions (dsched codenames)."""

    def make(*codenames: str) -> APIClient:
        return APIClient(user_with(codenames, name=f"user-{User.objects.count()}"))

    return make


@pytest.fixture
def root(db: None) -> APIClient:
    return APIClient(User.objects.create_superuser("root", "root@example.com", "pw"))


INTERVAL = {
    "name": "heartbeat",
    "kind": "INTERVAL",
    "every": 30,
    "unit": "SECONDS",
    "topic": "ops",
    "event_type": "ping",
}
