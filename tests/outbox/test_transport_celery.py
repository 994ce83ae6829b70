"""The Celery transport against real RabbitMQ and Redis servers, through the relay.

What the broker holds afterwards is read back with kombu, as a Celery worker would read it:
the task name, the task id (= the outbox message id), args, kwargs and the message options.
"""

from __future__ import annotations

import socket
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from django_dsched import api
from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.exceptions import PermanentDeliveryError
from django_dsched.models import OutboxMessage
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports.celery import CeleryTransport, broker_kind, task_message
from django_dsched.outbox.transports.registry import config_problems
from tests.brokers import free_port
from tests.outbox_helpers import statuses


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request) -> str:
    """The URL of a real broker, once RabbitMQ and once Redis."""
    name = "rabbitmq_url" if request.param == "rabbitmq" else "redis_url"
    return request.getfixturevalue(name)


def fire(name: str, data: dict, *, event_type: str = "reports.build") -> uuid.UUID:
    """A schedule fired once now (the exactly-once path); returns its outbox message id."""
    api.create_interval(
        name,
        every=1,
        unit="DAYS",
        start=datetime(2030, 1, 1, tzinfo=UTC),
        topic="celery",
        event_type=event_type,
        data=data,
    )
    api.trigger(name)
    return OutboxMessage.objects.get(aggregate_id=api.get(name).schedule_id).id


def received(url: str, queue: str, count: int) -> list:
    """Take ``count`` messages off ``queue`` the way a Celery worker's kombu consumer does."""
    from kombu import Connection

    messages = []
    with Connection(url) as connection:
        simple = connection.SimpleQueue(queue)
        try:
            for _ in range(count):
                message = simple.get(block=True, timeout=10)
                message.ack()
                messages.append(message)
        finally:
            simple.close()
    return messages


@pytest.mark.django_db(transaction=True)
def test_each_message_becomes_a_celery_task_sent_by_name(settings, broker):
    queue = f"reports-{uuid.uuid4().hex[:8]}"
    settings.DSCHED_TRANSPORTS = {
        "celery": {
            "BACKEND": "celery",
            "OPTIONS": {
                "BROKER_URL": broker,
                "QUEUE": queue,
                "HEADERS": {"team": "ops"},
                "TASK_FROM_DATA": True,
                "ALLOWED_TASKS": ["reports.tasks.*"],
                "OPTIONS_FROM_DATA": ["priority", "expires", "headers"],
            },
        }
    }
    first = fire(
        "report",
        {
            "task": "reports.tasks.build",
            "args": ["pdf", 3],
            "kwargs": {"lang": "nl"},
            "options": {"priority": 5, "expires": 3600, "headers": {"periodic_task_name": "r"}},
        },
    )
    second = fire("plain", {"kwargs": {"n": 1}}, event_type="reports.tasks.plain")

    assert Relay(instance_id="r1").run_until_idle() == 2

    assert statuses() == {DeliveryStatus.DELIVERED: 2}
    by_id = {m.headers["id"]: m for m in received(broker, queue, 2)}
    assert set(by_id) == {str(first), str(second)}  # the task id is the message id
    task = by_id[str(first)]
    assert task.headers["task"] == "reports.tasks.build"
    args, kwargs, _ = task.payload
    assert (args, kwargs) == (["pdf", 3], {"lang": "nl"})
    assert task.properties["priority"] == 5
    assert (task.headers["team"], task.headers["periodic_task_name"]) == ("ops", "r")
    event = OutboxMessage.objects.get(id=first).delivered_payload
    assert task.headers["dsched_slot"] == event["scheduledtime"]
    assert task.headers["dsched_host_id"] == str(app_settings.DEFAULT_HOST_ID)
    expires = datetime.fromisoformat(task.headers["expires"])
    assert expires == datetime.fromisoformat(event["time"]) + timedelta(hours=1)
    # No "task" in the data: the route's TASK, by default the event type.
    plain = by_id[str(second)]
    assert plain.headers["task"] == "reports.tasks.plain"
    assert plain.payload[:2] == [[], {"n": 1}]


@pytest.mark.django_db(transaction=True)
def test_a_send_to_rabbitmq_is_confirmed_on_a_confirm_channel(settings, rabbitmq_url):
    transport = CeleryTransport(BROKER_URL=rabbitmq_url, QUEUE=f"q-{uuid.uuid4().hex[:8]}")
    try:
        transport.send(Message(uuid.uuid4(), "celery", "t.x", {"data": {}}, 1))
        channel = transport._clients.get()[0].default_channel
        # py-amqp put the channel in confirm mode and waited for the broker's ack.
        assert transport._clients.get()[0].transport_options["confirm_publish"] is True
        assert channel._confirm_selected
    finally:
        transport.close()


def drop_connections(url: str, transport: CeleryTransport) -> None:
    """The broker loses the transport's connection (as after a restart or a network cut)."""
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        client.client_kill_filter(_type="normal", skipme=True)
        client.close()
    else:
        transport._clients.get()[0].connection.transport.sock.shutdown(socket.SHUT_RDWR)


def test_a_send_after_a_dropped_connection_reconnects(broker):
    queue = f"reconnect-{uuid.uuid4().hex[:8]}"
    transport = CeleryTransport(BROKER_URL=broker, QUEUE=queue)
    ids = [uuid.uuid4(), uuid.uuid4()]
    try:
        transport.send(Message(ids[0], "celery", "t.x", {"data": {}}, 1))
        drop_connections(broker, transport)
        transport.send(Message(ids[1], "celery", "t.x", {"data": {}}, 1))
    finally:
        transport.close()
    assert {m.headers["id"] for m in received(broker, queue, 2)} == {str(i) for i in ids}


@pytest.mark.django_db(transaction=True)
def test_an_event_that_cannot_make_a_task_is_dead_lettered_with_the_reason(settings, broker):
    settings.DSCHED_TRANSPORTS = {
        "celery": {
            "BACKEND": "celery",
            "OPTIONS": {
                "BROKER_URL": broker,
                "ALLOWED_TASKS": ["reports.*"],
                "TASK_FROM_DATA": True,
            },
        }
    }
    bad_args = fire("bad-args", {"task": "reports.x", "args": {"not": "a list"}})
    forbidden = fire("forbidden", {"task": "admin.drop_everything"})

    Relay(instance_id="r1").run_until_idle()

    rows = {r.id: r for r in OutboxMessage.objects.all()}
    assert {r.status for r in rows.values()} == {DeliveryStatus.DELIVERY_FAILED}
    assert 'data["args"] must be a list' in rows[bad_args].last_error
    assert "not in ALLOWED_TASKS" in rows[forbidden].last_error
    assert all(r.attempts == 1 for r in rows.values())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scheme", ["amqp", "redis"])
def test_a_broker_that_is_down_is_a_retryable_failure(settings, scheme):
    url = f"{scheme}://127.0.0.1:{free_port()}/"  # nothing listens there
    settings.DSCHED_TRANSPORTS = {
        "celery": {"BACKEND": "celery", "OPTIONS": {"BROKER_URL": url, "TIMEOUT": 1}}
    }
    message_id = fire("down", {"args": [1]})

    assert Relay(instance_id="r1").run_until_idle() == 0

    row = OutboxMessage.objects.get(id=message_id)
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert row.last_error and row.next_attempt_ts is not None


def test_the_mapping_rule():
    payload = {
        "subject": "s",
        "scheduledtime": "2026-01-01T00:00:00+00:00",
        "time": "2026-01-01T00:00:01+00:00",
        "data": {"options": {"queue": "q-{topic}", "expires": "2026-01-02T00:00:00+00:00"}},
    }
    message = Message(uuid.uuid4(), "billing", "billing.run", payload, 1)
    takes = ["queue", "expires", "priority", "headers"]
    route = {"TASK": "jobs.{type}", "QUEUE": "x", "OPTIONS_FROM_DATA": takes}
    name, args, kwargs, options = task_message(message, route)
    assert (name, args, kwargs) == ("jobs.billing.run", [], {})
    assert options["queue"] == "q-billing"  # the event's options win over the route's
    assert options["expires"] == datetime(2026, 1, 2, tzinfo=UTC)
    assert options["headers"]["dsched_schedule_id"] == "s"
    # What the data may choose is the route's to say: the task, and each option.
    for data, route, error in [
        ({"task": "x.y"}, {}, r"does not take the task from the data \(TASK_FROM_DATA"),
        ({"task": "x.y"}, {"TASK_FROM_DATA": True}, "TASK_FROM_DATA needs ALLOWED_TASKS"),
        ({"options": {"queue": "admin"}}, {}, r"sets queue, which this route does not take"),
        (
            {"options": {"queue": "q", "priority": 1}},
            {"OPTIONS_FROM_DATA": ["priority"]},
            "sets queue, which",
        ),
    ]:
        bad = Message(message.id, "billing", "billing.run", {**payload, "data": data}, 1)
        with pytest.raises(PermanentDeliveryError, match=error):
            task_message(bad, route)
    opted_in = {"TASK_FROM_DATA": True, "ALLOWED_TASKS": ["*"], "OPTIONS_FROM_DATA": takes}
    for data, error in [
        ({"task": ""}, "non-empty string"),
        ({"kwargs": []}, "must be an object"),
        ({"options": {"countdown": 5}}, "unknown key"),
        ({"options": {"priority": 300}}, "0 to 255"),
        ({"options": {"expires": "tomorrow"}}, "expires must be"),
        # Headers never replace Celery's own fields (the task run, its id).
        ({"task": "allowed.task", "options": {"headers": {"task": "evil.task"}}}, "own fields"),
        ({"options": {"headers": {"id": "fixed"}}}, "own fields: id"),
        ({"options": {"headers": {"dsched_slot": "x"}}}, "own fields: dsched_slot"),
        ({"options": {"headers": ["x"]}}, "must be an object"),
    ]:
        bad = Message(message.id, "billing", "billing.run", {**payload, "data": data}, 1)
        with pytest.raises(PermanentDeliveryError, match=error):
            task_message(bad, opted_in)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"BROKER_URL": 5}, "BROKER_URL must be a string"),
        ({"APP": "tests.nothing.here"}, "APP:"),
        ({"APP": "django_dsched.conf.app_settings"}, "is not a Celery app"),
        ({"PRIORITY": 256}, "PRIORITY"),
        ({"EXPIRES": 0}, "EXPIRES"),
        ({"ALLOWED_TASKS": "reports.*"}, "ALLOWED_TASKS"),
        ({"TASK_FROM_DATA": "yes"}, "TASK_FROM_DATA must be True or False"),
        ({"OPTIONS_FROM_DATA": ["countdown"]}, "OPTIONS_FROM_DATA must be a list of keys"),
        ({"QUEUES": ["x"]}, "unknown option(s) QUEUES"),
        ({"TIMEOUT": 15}, "less than a quarter of DSCHED_RELAY_VISIBILITY_TIMEOUT (60.0s)"),
    ],
)
def test_configuration_problems_are_reported(options, problem):
    problems = config_problems({"celery": {"BACKEND": "celery", "OPTIONS": options}})
    assert any(problem in p for p in problems), problems


def test_broker_kinds():
    assert broker_kind("pyamqp://guest@localhost//") == "amqp"
    assert broker_kind("rediss://localhost:6380/0") == "redis"
    assert broker_kind("sqs://") == "sqs"
