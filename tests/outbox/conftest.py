from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_dsched.handlers import registry
from tests.webhook_servers import Sink, serve_sink


@pytest.fixture
def sink(settings) -> Iterator[str]:
    """A local :class:`Sink`; its base URL. Webhooks refuse loopback addresses unless
    opened, so this opens 127.0.0.0/8 (and lists 127.0.0.1) for the test."""
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    Sink.requests = []
    with serve_sink() as url:
        yield url


@pytest.fixture
def handle():
    """``handle(func, topic=...)`` registers a handler for the test only."""
    registered = []

    def register(func, **key):
        registry.register(func, **key)
        registered.append((func, key))
        return func

    yield register
    for func, key in registered:
        registry.unregister(func, topic=key.get("topic"), event_type=key.get("event_type"))


@pytest.fixture
def relay_settings(settings):
    """Handlers for every topic, short backoffs, three attempts, a 30 s visibility timeout."""
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    settings.DSCHED_RELAY_RETRY_BASE = 1.0
    settings.DSCHED_RELAY_RETRY_MAX = 4.0
    settings.DSCHED_RELAY_MAX_ATTEMPTS = 3
    settings.DSCHED_RELAY_VISIBILITY_TIMEOUT = 30.0
    return settings
