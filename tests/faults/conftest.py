from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_dsched.handlers import registry


@pytest.fixture
def delivered(settings) -> Iterator[list[str]]:
    """Relays deliver the topic "reports" (the factory's) to an in-process handler that
    notes each message's id (short backoffs, a 2 s visibility timeout); the ids, in
    delivery order."""
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    settings.DSCHED_RELAY_RETRY_BASE = 0.2
    settings.DSCHED_RELAY_RETRY_MAX = 0.5
    settings.DSCHED_RELAY_MAX_ATTEMPTS = 3
    settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 2.0
    seen: list[str] = []

    def note(event: dict) -> None:
        seen.append(event["id"])

    registry.register(note, topic="reports")
    yield seen
    registry.unregister(note, topic="reports")
