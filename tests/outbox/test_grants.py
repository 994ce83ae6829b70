"""Grants: which hosts a route and a handler serve, the routes a host's message takes, the
{host} of destinations, and the checks dsched.E050 to E052 (the hostile tenant against real
destinations is tests/outbox/test_tenant_boundary.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from django_dsched.checks.delivery import check_delivery_settings
from django_dsched.conf import app_settings
from django_dsched.exceptions import (
    ConfigurationError,
    PermanentDeliveryError,
    TransportConfigError,
)
from django_dsched.handlers import HandlerRegistry, host_of
from django_dsched.outbox.coverage import unserved
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports import registry as registry_module
from django_dsched.outbox.transports.base import chosen_by_schedule, render
from django_dsched.outbox.transports.in_process import HandlerTransport
from django_dsched.outbox.transports.registry import NotGranted, Route, Transports
from django_dsched.outbox.transports.sqs import SQSTransport
from django_dsched.outbox.transports.webhook import UrlTemplate
from tests.factories import ScheduleFactory

OPERATOR = str(uuid.UUID(int=0))
HOST_A = "aaaaaaaa-0000-4000-8000-000000000001"
HOST_B = "bbbbbbbb-0000-4000-8000-000000000002"


def message(topic: str = "t", event_type: str = "e", host: str | None = HOST_B) -> Message:
    id_ = uuid.uuid4()
    payload = {"id": str(id_), "subject": str(uuid.uuid4())}
    if host is not None:
        payload["source"] = f"/django-dsched/{host}"
    return Message(id_, topic, event_type, payload, 1, host_id=host and uuid.UUID(host))


# -- routes -------------------------------------------------------------------------------------
def test_a_topic_takes_its_route_and_the_route_must_serve_the_host():
    transports = Transports(
        {
            "celery": {"BACKEND": "handlers"},  # the operator's host alone
            "reports": {"BACKEND": "handlers", "HOSTS": [HOST_A.upper()]},
            "*": {"BACKEND": "handlers", "HOSTS": "*"},
        },
        by_host={HOST_B: {"billing": {"BACKEND": "handlers"}}},
    )
    assert transports.route_for("celery") == Route(None, "celery")  # None: the operator's
    assert transports.route_for("celery", OPERATOR) == Route(None, "celery")
    assert transports.route_for("reports", HOST_A) == Route(None, "reports")
    assert transports.route_for("billing", HOST_B) == Route(HOST_B, "billing")
    assert transports.route_for("other", HOST_B) == Route(None, "*")
    # A route that does not serve the host is refused, never swapped for "*".
    with pytest.raises(NotGranted, match=f"topic 'celery' is not granted to host {HOST_A}: its"):
        transports.route_for("celery", HOST_A)
    with pytest.raises(NotGranted, match="its route 'reports' in DSCHED_TRANSPORTS serves other"):
        transports.route_for("reports", HOST_B)
    with pytest.raises(NotGranted):
        transports.route_for("reports", OPERATOR)
    assert transports.refusal("reports", OPERATOR) is not None
    assert transports.refusal("billing", HOST_B) is None


def test_with_no_route_at_all_the_operator_retries_and_a_tenant_is_refused():
    transports = Transports({"reports": {"BACKEND": "handlers"}}, by_host={})
    with pytest.raises(TransportConfigError, match="no transport is configured"):
        transports.route_for("billing")
    with pytest.raises(NotGranted, match="no route of DSCHED_TRANSPORTS or of the host's"):
        transports.route_for("billing", HOST_B)
    assert transports.refusal("billing", OPERATOR) is None  # the doors let it in, as before


@pytest.mark.parametrize("hosts", ["everyone", [], ["tenant-a"], 42])
def test_a_malformed_grant_serves_no_host(hosts):
    transports = Transports({"*": {"BACKEND": "handlers", "HOSTS": hosts}}, by_host={})
    for host in (OPERATOR, HOST_A):
        with pytest.raises(NotGranted):
            transports.route_for("t", host)


def test_a_shared_route_a_topic_could_steer_serves_the_operator_alone():
    """The relay's twin of dsched.E051: were the checks skipped, other hosts are refused."""
    transports = Transports(
        {"*": {"BACKEND": "redis", "HOSTS": "*", "OPTIONS": {"STREAM": "dsched:{topic}"}}},
        by_host={HOST_B: {"own": {"BACKEND": "redis"}}},
    )
    assert transports.route_for("audit", OPERATOR) == Route(None, "*")
    with pytest.raises(NotGranted, match=r"cannot serve it \(dsched\.E051: STREAM 'dsched:"):
        transports.route_for("audit", HOST_A)
    with pytest.raises(NotGranted, match="DSCHED_TRANSPORTS_BY_HOST cannot serve it"):
        transports.route_for("own", HOST_B)  # a tenant's own table, as careless


def test_the_routes_a_router_remembers_are_bounded(monkeypatch):
    """Topics are the tenants' to choose: a million of them cannot grow a relay or a web
    process without bound."""
    monkeypatch.setattr(registry_module, "ROUTES_KEPT", 3)
    transports = Transports({"*": {"BACKEND": "handlers", "HOSTS": "*"}}, by_host={})
    for n in range(10):
        assert transports.route_for(f"t{n}", HOST_A) == Route(None, "*")
        assert len(transports._routes) <= 3


# -- destinations -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "chosen"),
    [
        ("dsched:{topic}", True),
        ("{type}", True),
        ("https://h/{event_type}", True),
        ("{topic}.{host}", True),
        ("dsched:{host}:{topic}", False),
        ("{host}{type}", False),
        ("events", False),
        ("{host}", False),
    ],
)
def test_a_destination_is_chosen_by_the_schedule_unless_host_comes_first(template, chosen):
    assert chosen_by_schedule(template) is chosen


def test_host_is_filled_in_every_destination():
    m = message("a/b", "x.y")
    assert render("s:{host}:{topic}:{type}", m) == f"s:{HOST_B}:a/b:x.y"
    url = UrlTemplate("https://h.example/{host}/{topic}").render(m)
    assert url == f"https://h.example/{HOST_B}/a%2Fb"
    with pytest.raises(PermanentDeliveryError, match="names no host"):
        render("{host}", message(host=None))


def test_an_sqs_queue_name_is_filled_in_percent_encoded():
    transport = SQSTransport(
        QUEUE_URL="http://127.0.0.1:1/000000000000/{host}-{topic}",
        ENDPOINT_URL="http://127.0.0.1:1",
        REGION="us-east-1",
        ACCESS_KEY_ID="k",
        SECRET_ACCESS_KEY="s",
    )
    try:
        entry = transport.entry(0, message("ops"))
        assert entry.queue_url == f"http://127.0.0.1:1/000000000000/{HOST_B}-ops"
        with pytest.raises(PermanentDeliveryError, match=f"'{HOST_B}-x%2Fvictim' is not an SQS"):
            transport.entry(0, message("x/victim"))
    finally:
        transport.close()


# -- handlers -----------------------------------------------------------------------------------
def test_a_handler_serves_the_operator_unless_it_grants_others():
    registry = HandlerRegistry()
    calls: list[Any] = []
    registry.register(calls.append, topic="billing")  # the operator's
    registry.register(lambda e: calls.append(host_of(e)), topic="notes", hosts=[HOST_A])
    registry.register(lambda e: calls.append("any"), topic="ping", hosts="*")
    transport = HandlerTransport(registry_=registry)

    transport.send(message("billing", host=OPERATOR))
    transport.send(message("notes", host=HOST_A))
    transport.send(message("ping", host=HOST_B))
    assert calls[1:] == [uuid.UUID(HOST_A), "any"]
    for refused in (message("billing", host=HOST_B), message("notes", host=OPERATOR)):
        with pytest.raises(PermanentDeliveryError, match="does not serve host"):
            transport.send(refused)
    assert len(calls) == 3  # nothing ran for them


def test_one_handler_that_does_not_serve_the_host_stops_them_all():
    registry = HandlerRegistry()
    calls: list[str] = []
    registry.register(lambda e: calls.append("type"), event_type="e", hosts="*")
    registry.register(lambda e: calls.append("topic"), topic="billing")
    with pytest.raises(PermanentDeliveryError, match="topic 'billing' / event type 'e'"):
        HandlerTransport(registry_=registry).send(message("billing", "e"))
    assert calls == []


@pytest.mark.parametrize("hosts", ["everyone", [], ["tenant-a"]])
def test_a_malformed_handler_grant_is_refused_when_registered(hosts):
    with pytest.raises(ConfigurationError, match="hosts="):
        HandlerRegistry().register(print, topic="t", hosts=hosts)


def test_host_of_reads_the_envelopes_source():
    assert host_of({"source": f"/django-dsched/{HOST_A.upper()}"}) == uuid.UUID(HOST_A)
    with pytest.raises(ValueError, match="not an event of django-dsched"):
        host_of({"source": "/elsewhere/x", "data": {"host": HOST_A}})


# -- checks -------------------------------------------------------------------------------------
def entry(backend: str, hosts: Any = None, **options: Any) -> dict[str, Any]:
    route: dict[str, Any] = {"BACKEND": backend, "OPTIONS": options}
    if hosts is not None:
        route["HOSTS"] = hosts
    return route


AWS = "https://sqs.eu-west-1.amazonaws.com/1/"


@pytest.mark.parametrize(
    ("transports", "by_host", "expected"),
    [
        ({"*": entry("handlers", "all")}, {}, ["dsched.E050"]),
        ({"*": entry("handlers", ["x"])}, {}, ["dsched.E050"]),
        ({"*": entry("handlers")}, {HOST_B: {"*": entry("handlers", "*")}}, ["dsched.E050"]),
        ({"*": entry("redis", "*")}, {}, ["dsched.E051"]),
        ({"*": entry("redis")}, {HOST_B: {"*": entry("redis")}}, ["dsched.E051"]),
        ({"*": entry("redis")}, {OPERATOR: {"*": entry("redis")}}, []),
        ({"*": entry("redis", "*", STREAM="d:{host}:{topic}")}, {}, []),
        ({"*": entry("redis", [OPERATOR])}, {}, []),
        ({"*": entry("rabbitmq", "*")}, {}, ["dsched.E051"]),
        ({"*": entry("rabbitmq", "*", EXCHANGE="events")}, {}, []),
        ({"*": entry("rabbitmq", "*", ROUTING_KEY="{host}.{topic}")}, {}, []),
        ({"*": entry("sqs", "*", QUEUE_URL=AWS + "{topic}")}, {}, ["dsched.E051"]),
        ({"*": entry("sqs", "*", QUEUE_URL=AWS + "{host}-{topic}")}, {}, []),
        ({"*": entry("webhook", "*", URL="https://h.example/{type}")}, {}, ["dsched.E051"]),
        ({"*": entry("webhook", "*", URL="https://h.example/{host}/{type}")}, {}, []),
        ({"c": entry("celery", TASK_FROM_DATA=True)}, {}, ["dsched.E052"]),
        ({"c": entry("celery", TASK_FROM_DATA=True, ALLOWED_TASKS=["a.*"])}, {}, []),
        ({"c": entry("celery", "*")}, {}, ["dsched.E052"]),  # TASK {type}: the topic's choice
        ({"c": entry("celery", "*", TASK="reports.build")}, {}, []),
        ({"c": entry("celery", "*", TASK="r.b", QUEUE="{topic}")}, {}, ["dsched.E051"]),
        ({"c": entry("celery", "*", TASK="r.b", OPTIONS_FROM_DATA=["queue"])}, {}, ["dsched.E051"]),
        ({"c": entry("celery", OPTIONS_FROM_DATA=["queue"])}, {}, []),
    ],
)
def test_the_grants_checks(settings, transports, by_host, expected):
    settings.DSCHED_TRANSPORTS = transports
    settings.DSCHED_TRANSPORTS_BY_HOST = by_host
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["h.example"]
    found = [e for e in check_delivery_settings() if e.id.startswith("dsched.E05")]
    assert [e.id for e in found] == expected, [e.msg for e in found]
    assert all(e.hint for e in found)


# -- coverage (dsched.W003) -----------------------------------------------------------------------
@pytest.mark.django_db
def test_schedules_nobody_would_serve_for_their_host_are_reported(settings):
    settings.DSCHED_TRANSPORTS = {"celery": entry("celery"), "*": entry("handlers", "*")}
    registry = HandlerRegistry()
    registry.register(print, topic="billing")
    ScheduleFactory(host_id=HOST_B, event_topic="celery")
    ScheduleFactory(host_id=HOST_B, event_topic="billing")
    ScheduleFactory(host_id=app_settings.DEFAULT_HOST_ID, event_topic="billing")

    found = {(u.host_id, u.topic): u.why for u in unserved(handlers=registry)}

    assert set(found) == {(HOST_B, "celery"), (HOST_B, "billing")}
    assert "is not granted to host" in found[HOST_B, "celery"]
    assert "does not serve host" in found[HOST_B, "billing"]
