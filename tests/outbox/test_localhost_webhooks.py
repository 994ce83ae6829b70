"""A webhook to ``localhost`` on a dual-stack host (issue 41): ``localhost`` resolves to
``::1`` and ``127.0.0.1``; the documented local-test allowlist ``["127.0.0.1/32"]`` opens
this machine by either family, and ``check`` warns when an allowlisted localhost name has
an address the allowlist still refuses (a name with one refused address is refused)."""

from __future__ import annotations

import uuid

import pytest
from django.core.checks import run_checks

from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports import PermanentDeliveryError
from django_dsched.outbox.transports.addresses import parse_address, parse_networks, refusal
from django_dsched.outbox.transports.webhook import WebhookTransport
from tests.webhook_servers import Sink, StubResolver, serve_sink

LOCAL_TEST = ["127.0.0.1/32"]  # docs/delivery.md's allowlist for a local test server


@pytest.fixture
def dual_stack(settings):
    resolver = StubResolver({"localhost": ["::1", "127.0.0.1"]})
    settings.DSCHED_WEBHOOK_RESOLVER = resolver
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["localhost"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = LOCAL_TEST
    return resolver


def message() -> Message:
    id_ = uuid.uuid4()
    return Message(id_, "mail", "invoice.send", {"id": str(id_)}, 1)


def test_a_webhook_to_localhost_is_delivered_on_a_dual_stack_host(dual_stack):
    with serve_sink() as base:  # listens on 127.0.0.1 only: ::1 is tried first and fails
        Sink.requests = []
        port = base.rsplit(":", 1)[1]
        transport = WebhookTransport(URL=f"http://localhost:{port}/ok/in", TIMEOUT=2)
        transport.send(message())
        transport.close()
    assert [path for path, _headers, _body in Sink.requests] == ["/ok/in"]


def test_one_loopback_opens_the_other_and_nothing_more():
    allowed = parse_networks(LOCAL_TEST)
    assert refusal(parse_address("127.0.0.1"), allowed) is None
    assert refusal(parse_address("::1"), allowed) is None
    assert refusal(parse_address("::1"), parse_networks(["::1/128"])) is None
    assert refusal(parse_address("127.0.0.1"), parse_networks(["::1/128"])) is None
    # The rest of 127/8, and every other range, stay as the allowlist says.
    assert refusal(parse_address("127.0.0.2"), allowed) == "127.0.0.2 is loopback"
    assert refusal(parse_address("10.0.0.1"), allowed) == "10.0.0.1 is private"
    assert refusal(parse_address("::1"), ()) == "::1 is loopback"


def test_a_name_with_one_refused_address_is_still_refused(dual_stack):
    dual_stack.names["localhost"] = ["10.9.8.7", "127.0.0.1"]
    transport = WebhookTransport(URL="http://localhost:9/ok", TIMEOUT=1)
    with pytest.raises(PermanentDeliveryError, match=r"10\.9\.8\.7 is private"):
        transport.send(message())
    transport.close()


def warnings_041() -> list[str]:
    return [m.msg for m in run_checks() if m.id == "dsched.W041"]


def test_check_warns_when_localhost_would_be_refused(dual_stack):
    assert warnings_041() == []  # the dual-stack case is delivered: nothing to say
    dual_stack.names["localhost"] = ["127.0.0.1", "10.9.8.7"]
    (warning,) = warnings_041()
    assert "localhost resolves to 127.0.0.1, 10.9.8.7" in warning
    assert "10.9.8.7 is private" in warning


def test_check_resolves_no_name_but_this_machines(dual_stack, settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com", ".example.org:8443"]
    assert warnings_041() == []
    assert dual_stack.calls == []
