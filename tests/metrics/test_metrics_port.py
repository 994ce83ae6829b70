"""The processes' own /metrics (``--metrics-port``): served by the bounded one-thread server,
closed to anyone without DSCHED_METRICS_TOKEN once it is set (issue 39), in the format the
scraper asks for."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from django_dsched.metrics.registry import serve
from django_dsched.runtime.http import EndpointServer


@pytest.fixture
def port() -> Iterator[int]:
    registry = CollectorRegistry()
    Counter("dsched_test_things", "Things.", registry=registry).inc(3)
    server: EndpointServer = serve(0, "127.0.0.1", registry)
    yield server.port
    server.stop()


def scrape(port: int, path: str = "/metrics", **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_without_a_token_the_port_serves_whoever_reaches_it(port):
    status, headers, body = scrape(port)
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
    assert b"dsched_test_things_total 3.0" in body
    assert scrape(port, "/")[0] == 404


def test_with_a_token_only_a_scraper_sending_it_is_answered(port, settings):
    settings.DSCHED_METRICS_TOKEN = "s3cret"
    status, headers, body = scrape(port)
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="dsched-metrics"'
    assert b"dsched_test" not in body
    assert scrape(port, Authorization="Bearer wrong")[0] == 401
    assert scrape(port, Authorization="Basic s3cret")[0] == 401
    status, _, body = scrape(port, Authorization="Bearer s3cret")
    assert status == 200 and b"dsched_test_things_total 3.0" in body


def test_openmetrics_and_gzip_as_the_scraper_asks(port):
    status, headers, body = scrape(
        port,
        Accept="application/openmetrics-text; version=1.0.0",
        **{"Accept-Encoding": "gzip"},
    )
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = gzip.decompress(body)
    assert b"dsched_test_things_total 3.0" in text and text.endswith(b"# EOF\n")
