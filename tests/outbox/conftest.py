from __future__ import annotations

from collections.abc import Iterator

import pytest

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
