"""Transport routing, the webhook transport (real local HTTP server) and Django tasks."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports import (
    DeliveryError,
    PermanentDeliveryError,
    TransportConfigError,
    Transports,
)
from django_dsched.outbox.transports.in_process import HandlerTransport
from django_dsched.outbox.transports.registry import config_problems, routing_problems
from django_dsched.outbox.transports.webhook import WebhookTransport, host_allowed
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.outbox_helpers import make_messages, statuses
from tests.webhook_servers import Sink

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

TASK_CALLS: list[dict] = []


@task()
def record_event(event: dict) -> None:
    TASK_CALLS.append(event)


def message(topic: str = "reports", event_type: str = "report.build") -> Message:
    id_ = uuid.uuid4()
    return Message(id_, topic, event_type, {"id": str(id_), "type": event_type}, 1)


# -- routing ---------------------------------------------------------------------------------
def test_router_prefers_exact_then_longest_pattern_then_star():
    transports = Transports(
        {
            "*": {"BACKEND": "handlers"},
            "billing.*": {"BACKEND": "handlers", "OPTIONS": {"ATOMIC": False}},
            "billing.eu.*": {"BACKEND": "handlers"},
            "reports": {"BACKEND": "handlers"},
        }
    )
    assert transports.key_for("reports") == "reports"
    assert transports.key_for("billing.us") == "billing.*"
    assert transports.key_for("billing.eu.de") == "billing.eu.*"
    assert transports.key_for("other") == "*"
    assert transports.for_topic("billing.us") is transports.for_topic("billing.ca")
    assert isinstance(transports.for_topic("other"), HandlerTransport)


def test_router_without_star_refuses_unknown_topics():
    with pytest.raises(TransportConfigError, match="no transport is configured"):
        Transports({"reports": {"BACKEND": "handlers"}}).for_topic("billing")


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({}, "non-empty dict"),
        ({"*": {"OPTIONS": {}}}, "needs a BACKEND"),
        ({"*": {"BACKEND": "carrier-pigeon"}}, "BACKEND 'carrier-pigeon'"),
        ({"*": {"BACKEND": "django_dsched.conf.AppSettings"}}, "not a django_dsched Transport"),
        ({"*": {"BACKEND": "redis", "OPTIONS": {"HOST": "x"}}}, "unknown option(s) HOST"),
        ({"*": {"BACKEND": "redis", "OPTIONS": {"MAXLEN": -1}}}, "MAXLEN"),
        ({"*": {"BACKEND": "handlers", "QUEUE": 1}}, "unknown key(s) QUEUE"),
        ({"*": {"BACKEND": "tasks", "OPTIONS": {"TASKS": {"a": "os.path.join"}}}}, "not a task"),
        ({"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "ftp://x"}}}, "http:// or https://"),
        ({"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://evil.test/"}}}, "not in DSCHED"),
    ],
)
def test_config_problems(config, problem):
    assert any(problem in p for p in config_problems(config)), config_problems(config)


def test_good_config_has_no_problems(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]
    config = {
        "*": {"BACKEND": "handlers"},
        "r": {"BACKEND": "redis", "OPTIONS": {"URL": "redis://x:1/0", "MAXLEN": 5}},
        "q": {"BACKEND": "rabbitmq", "OPTIONS": {"URL": "amqp://u:p@x:1/%2F"}},
        "w": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://hooks.example.com/{topic}"}},
        "t": {
            "BACKEND": "tasks",
            "OPTIONS": {"TASKS": {"report.build": "tests.outbox.test_transports.record_event"}},
        },
    }
    assert config_problems(config) == []


HOST_A = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000001")
HOST_B = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000002")


def hosted(topic: str, host: uuid.UUID) -> Message:
    """A message as the fire path writes it: the envelope's source names the host."""
    id_ = uuid.uuid4()
    payload = {"id": str(id_), "type": "t", "source": f"/django-dsched/{host}"}
    return Message(id_, topic, "t", payload, 1)


def test_router_takes_the_hosts_table_first_then_the_global_one():
    transports = Transports(
        {
            "*": {"BACKEND": "handlers", "HOSTS": "*"},
            "billing.*": {"BACKEND": "handlers", "HOSTS": "*"},
        },
        by_host={
            str(HOST_A).upper(): {"billing.eu": {"BACKEND": "handlers"}},
            HOST_B: {"*": {"BACKEND": "handlers", "OPTIONS": {"ATOMIC": True}}},
        },
    )
    assert transports.route_for("billing.eu", HOST_A) == (str(HOST_A), "billing.eu")
    assert transports.route_for("billing.us", HOST_A) == (None, "billing.*")
    assert transports.route_for("anything", HOST_B) == (str(HOST_B), "*")
    assert transports.route_for("billing.eu", None) == (None, "billing.*")
    a_eu = transports.for_message(hosted("billing.eu", HOST_A))
    b_eu = transports.for_message(hosted("billing.eu", HOST_B))
    assert a_eu is not b_eu and b_eu.settings == {"ATOMIC": True}
    assert transports.for_message(hosted("billing.us", HOST_A)) is transports.for_message(
        message("billing.us")
    )


@pytest.mark.parametrize(
    ("by_host", "problem"),
    [
        ([], "must be a dict of host ids"),
        ({"tenant-a": {"*": {"BACKEND": "handlers"}}}, "'tenant-a' is not a host id (a UUID)"),
        ({str(HOST_A): {}}, "non-empty dict"),
        ({str(HOST_A): {"*": {"BACKEND": "redis", "OPTIONS": {"HOST": "x"}}}},
         "DSCHED_TRANSPORTS_BY_HOST['aaaaaaaa-0000-4000-8000-000000000001']: '*' (redis): "
         "unknown option(s) HOST"),
        ({str(HOST_A): {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://evil.test/"}}}},
         "not in DSCHED_WEBHOOK_ALLOWED_HOSTS"),
    ],
)  # fmt: skip
def test_host_routing_problems(by_host, problem):
    problems = routing_problems({"*": {"BACKEND": "handlers"}}, by_host)
    assert any(problem in p for p in problems), problems


@pytest.mark.django_db(transaction=True)
def test_each_tenant_gets_its_own_webhook_url_secret_and_headers(settings, sink):
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "webhook",
            "HOSTS": "*",
            "OPTIONS": {"URL": sink + "/ok/shared/{host}/{topic}", "SECRET": "shared-secret"},
        }
    }
    settings.DSCHED_TRANSPORTS_BY_HOST = {
        str(HOST_A): {
            "reports": {
                "BACKEND": "webhook",
                "OPTIONS": {
                    "URL": sink + "/ok/a/reports",  # fixed: tenant A's table is A's to reach
                    "SECRET": "secret-a",
                    "HEADERS": {"X-Tenant": "a"},
                },
            }
        }
    }
    ScheduleFactory(host_id=HOST_A, event_topic="reports")
    ScheduleFactory(host_id=HOST_B, event_topic="reports")
    ScheduleFactory(host_id=HOST_A, event_topic="billing")
    assert Scheduler(instance_id="leader").run_until_idle() == 3

    assert Relay(instance_id="r1").run_until_idle() == 3

    received = {path: (headers, body) for path, headers, body in Sink.requests}
    b_reports, a_billing = f"/ok/shared/{HOST_B}/reports", f"/ok/shared/{HOST_A}/billing"
    assert set(received) == {"/ok/a/reports", b_reports, a_billing}
    for path, secret in [
        ("/ok/a/reports", b"secret-a"),
        (b_reports, b"shared-secret"),
        (a_billing, b"shared-secret"),
    ]:
        headers, body = received[path]
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
        assert headers["X-Dsched-Signature"] == f"sha256={expected}", path
        assert headers.get("X-Tenant") == ("a" if "/a/" in path else None)


# -- Django tasks ----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_relay_enqueues_the_mapped_task(settings):
    settings.TASKS = {"default": {"BACKEND": immediate_backend()}}
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "tasks",
            "OPTIONS": {"TASKS": {"report.build": "tests.outbox.test_transports.record_event"}},
        }
    }
    TASK_CALLS.clear()
    ids = make_messages(3)
    (other,) = make_messages(1, event_type="unmapped.type")

    assert Relay(instance_id="r1").run_until_idle() == 3

    assert [call["id"] for call in TASK_CALLS] == [str(i) for i in ids]
    assert TASK_CALLS[0]["data"] == {"n": 1}
    row = OutboxMessage.objects.get(id=other)
    assert row.status == DeliveryStatus.PENDING
    assert "no task is mapped to event type 'unmapped.type'" in row.last_error


def immediate_backend() -> str:
    try:
        import django.tasks  # noqa: F401

        return "django.tasks.backends.immediate.ImmediateBackend"
    except ImportError:
        return "django_tasks.backends.immediate.ImmediateBackend"


# -- webhooks --------------------------------------------------------------------------------
@pytest.fixture
def hook(settings, sink):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]

    def make(path: str, **options) -> WebhookTransport:
        return WebhookTransport(URL=sink + path, **{"TIMEOUT": 1.0, **options})

    return make


@pytest.mark.django_db(transaction=True)
def test_relay_posts_cloudevents_to_a_webhook(settings, sink):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "webhook",
            "OPTIONS": {"URL": sink + "/ok/{topic}", "SECRET": "s3cret", "TIMEOUT": 2},
        }
    }
    ids = make_messages(3)

    assert Relay(instance_id="r1").run_until_idle() == 3

    assert [path for path, _, _ in Sink.requests] == ["/ok/reports"] * 3
    # Sent at once (the route's CONCURRENCY): they may arrive in any order.
    by_id = {json.loads(body)["id"]: (headers, body) for _, headers, body in Sink.requests}
    assert set(by_id) == {str(id_) for id_ in ids}
    headers, body = by_id[str(ids[0])]
    assert json.loads(body)["specversion"] == "1.0"
    assert headers["Content-Type"] == "application/cloudevents+json; charset=utf-8"
    assert headers["Idempotency-Key"] == str(ids[0])
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Dsched-Signature"] == f"sha256={expected}"
    assert statuses() == {DeliveryStatus.DELIVERED: 3}


@pytest.mark.django_db(transaction=True)
def test_webhook_5xx_is_retried_and_4xx_dead_letters(settings, sink):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_TRANSPORTS = {
        "flaky": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/fail", "TIMEOUT": 2}},
        "gone": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/gone", "TIMEOUT": 2}},
    }
    (flaky,) = make_messages(1, topic="flaky")
    (gone,) = make_messages(1, topic="gone")

    Relay(instance_id="r1").run_until_idle()

    flaky_row, gone_row = OutboxMessage.objects.get(id=flaky), OutboxMessage.objects.get(id=gone)
    assert flaky_row.status == DeliveryStatus.PENDING and flaky_row.next_attempt_ts
    assert "HTTP 503" in flaky_row.last_error and "try later" in flaky_row.last_error
    assert gone_row.status == DeliveryStatus.DELIVERY_FAILED and gone_row.attempts == 1
    assert "HTTP 410" in gone_row.last_error


def test_webhook_follows_307_only_within_its_origin(hook):
    hook("/redirect-in").send(message())
    assert [p for p, _, _ in Sink.requests] == ["/redirect-in", "/ok/after-redirect"]
    assert Sink.requests[1][2] == Sink.requests[0][2]  # same body after the redirect

    with pytest.raises(PermanentDeliveryError, match="redirect to another origin not followed"):
        hook("/redirect-out").send(message())
    with pytest.raises(PermanentDeliveryError, match="HTTP 302 redirect not followed"):
        hook("/redirect-get").send(message())
    assert not any(p == "/ok" for p, _, _ in Sink.requests)


def test_webhook_refuses_unlisted_hosts_before_connecting(settings, sink):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]
    with pytest.raises(PermanentDeliveryError, match="not in DSCHED_WEBHOOK_ALLOWED_HOSTS"):
        WebhookTransport(URL=sink + "/ok").send(message())
    assert Sink.requests == []


def test_webhook_times_out(hook):
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="timed out") as failure:
        hook("/slow", TIMEOUT=0.3).send(message())
    assert not isinstance(failure.value, PermanentDeliveryError)
    assert time.monotonic() - started < 1.5


def test_webhook_429_is_retryable(hook):
    with pytest.raises(DeliveryError) as failure:
        hook("/throttled").send(message())
    assert not isinstance(failure.value, PermanentDeliveryError)


def test_webhook_reads_no_more_than_its_cap(hook):
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="HTTP 500") as failure:
        hook("/huge-error", MAX_RESPONSE_BYTES=4096, TIMEOUT=5).send(message())
    assert len(str(failure.value)) < 700
    assert time.monotonic() - started < 3  # did not read 50 MiB


@pytest.mark.parametrize(
    ("url", "allowed", "ok"),
    [
        ("https://hooks.example.com/x", ["hooks.example.com"], True),
        ("https://HOOKS.example.com./x", ["hooks.example.com"], True),
        ("https://hooks.example.com:8443/x", ["hooks.example.com:443"], False),
        ("https://hooks.example.com/x", ["hooks.example.com:443"], True),
        ("http://a.example.com/x", [".example.com"], True),
        ("http://example.com/x", [".example.com"], True),
        ("http://badexample.com/x", [".example.com"], False),
        ("http://example.com.evil.test/x", ["example.com"], False),
        ("http://user@evil.test/x", ["user"], False),
        ("http://[::1]:8080/x", ["[::1]:8080"], True),
        ("file:///etc/passwd", ["localhost"], False),
        ("http://127.0.0.1:notaport/", ["127.0.0.1"], False),
    ],
)
def test_host_allowlist(url, allowed, ok):
    assert host_allowed(url, allowed) is ok
