"""A hostile tenant against every transport: tenancy is a boundary for delivery.

Mallory is a REST user of host B (not staff; ``view_schedule`` and ``add_schedule`` only), in
projects whose operator routes some topics to its own transports, as the docs show. For each
transport, Mallory creates over REST the schedule that would reach what the operator did not
grant B, a real relay (in process, driven to completion) delivers, and the destination is
read: nothing Mallory was not granted happens (no task on the broker, no handler call, no
request to the operator's endpoint, no entry in another queue or stream), and the message is a
dead letter at its first attempt, saying why. The operator's own message, sent the same way
in the same run, arrives: the destination was read right.

Where a route is not granted to B at all, the door refuses the create (400, naming the topic);
the schedule is then made as it would have been before the grants existed (an upgrade), or
while the operator still gave B a table of its own, and the relay is the boundary.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.checks import Error

from django_dsched import api, declared
from django_dsched.checks.delivery import check_delivery_settings
from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.handlers import registry
from django_dsched.models import OutboxMessage
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler import Scheduler
from tests.outbox_helpers import celery_route, celery_tasks_waiting
from tests.rest.conftest import APIClient, user_with
from tests.rest.hosts import HOST_B
from tests.sqs_server import KEYS, REGION
from tests.webhook_servers import Sink

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

pytestmark = pytest.mark.django_db(transaction=True)

# Every other topic goes to in-process handlers, which the operator grants to every host.
HANDLERS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
TASK_CALLS: list[dict] = []


@task()
def record_task(event: dict) -> None:
    TASK_CALLS.append(event)


@pytest.fixture
def mallory(settings) -> APIClient:
    """Host B's REST user, who may view and add schedules and nothing else."""
    settings.DSCHED_API_HOST_RESOLVER = "tests.rest.hosts.by_username"
    settings.DSCHED_RELAY_MAX_ATTEMPTS = 5  # a dead letter at attempt 1 is a refusal
    settings.DSCHED_TRANSPORTS_BY_HOST = {}
    return APIClient(user_with(["view_schedule", "add_schedule"], name="mallory-b"))


def one_shot(topic: str, event_type: str = "job.run", data: Any = None) -> dict:
    return {
        "name": f"s-{uuid.uuid4().hex[:8]}",
        "kind": "ONCE",
        "delay": 0,
        "topic": topic,
        "event_type": event_type,
        "data": data or {},
    }


def created(client: APIClient, body: dict) -> uuid.UUID:
    response = client.post("schedules/", body)
    assert response.status_code == 201, response.body
    return uuid.UUID(response.body["id"])


def refused_at_the_door(client: APIClient, body: dict) -> None:
    response = client.post("schedules/", body)
    assert response.status_code == 400, response.body
    assert f"topic {body['topic']!r} is not granted to host {HOST_B}" in json.dumps(response.body)


def created_before_the_grants(client: APIClient, settings: Any, body: dict) -> uuid.UUID:
    """The door refuses ``body``; the same schedule made while host B still had a table of
    its own (as before an upgrade to grants, or before the operator took it away)."""
    refused_at_the_door(client, body)
    settings.DSCHED_TRANSPORTS_BY_HOST = {str(HOST_B): {"*": {"BACKEND": "handlers"}}}
    try:
        return created(client, body)
    finally:
        settings.DSCHED_TRANSPORTS_BY_HOST = {}


def operators(topic: str, event_type: str = "job.run", data: Any = None) -> uuid.UUID:
    """The operator's own one-shot (host DSCHED_DEFAULT_HOST_ID), due now."""
    schedule = api.create_once(
        f"op-{uuid.uuid4().hex[:8]}",
        delay=timedelta(0),
        topic=topic,
        event_type=event_type,
        data=data or {},
    )
    return schedule.schedule_id


def deliver() -> None:
    Scheduler(instance_id="leader").run_until_idle()
    Relay(instance_id="relay").run_until_idle()


def message_of(schedule_id: uuid.UUID) -> OutboxMessage:
    return OutboxMessage.objects.get(aggregate_id=schedule_id)


def dead_letter(schedule_id: uuid.UUID, reason: str) -> None:
    message = message_of(schedule_id)
    assert (message.status, message.attempts) == (DeliveryStatus.DELIVERY_FAILED, 1), (
        message.status,
        message.last_error,
    )
    assert reason in message.last_error, message.last_error


def delivered(*schedule_ids: uuid.UUID) -> None:
    for schedule_id in schedule_ids:
        message = message_of(schedule_id)
        assert message.status == DeliveryStatus.DELIVERED, message.last_error


def not_granted(topic: str) -> str:
    return f"NotGranted: topic {topic!r} is not granted to host {HOST_B}"


# -- Celery -------------------------------------------------------------------------------------
def test_a_task_named_in_the_data_never_reaches_the_operators_worker(
    settings,
    mallory,
    redis_url,
):
    """The issue's one-shot: topic celery, data naming a task of the operator's and the queue
    it goes to, on the route docs/migrating-from-celery-beat.md gives."""
    queue, elsewhere = f"celery-{uuid.uuid4().hex[:8]}", f"admin-{uuid.uuid4().hex[:8]}"
    settings.DSCHED_TRANSPORTS = {
        "celery": celery_route(
            redis_url, queue, ["accounts.tasks.*", "reports.*"], ["queue", "headers"]
        ),
        **HANDLERS,
    }
    data = {
        "task": "accounts.tasks.make_superuser",
        "args": ["tenant_b"],
        "options": {"queue": elsewhere},
    }
    hostile = created_before_the_grants(mallory, settings, one_shot("celery", data=data))
    control = operators("celery", data={"task": "reports.build", "args": ["pdf"]})

    deliver()

    assert [headers["task"] for headers in celery_tasks_waiting(redis_url, queue)] == [
        "reports.build"
    ]
    assert celery_tasks_waiting(redis_url, elsewhere) == []
    dead_letter(hostile, not_granted("celery"))
    delivered(control)


def test_a_celery_route_shared_with_tenants_takes_neither_task_nor_queue_from_their_data(
    settings,
    mallory,
    redis_url,
):
    queue, elsewhere = f"tenants-{uuid.uuid4().hex[:8]}", f"admin-{uuid.uuid4().hex[:8]}"
    settings.DSCHED_TRANSPORTS = {
        "celery": {
            "BACKEND": "celery",
            "HOSTS": "*",
            "OPTIONS": {
                "BROKER_URL": redis_url,
                "QUEUE": queue,
                "TASK": "reports.build",
                "ALLOWED_TASKS": ["reports.*"],
            },
        },
    }
    hostile = created(
        mallory,
        one_shot("celery", data={"task": "reports.purge_all", "options": {"queue": elsewhere}}),
    )
    benign = created(mallory, one_shot("celery", data={"args": ["pdf"]}))

    deliver()

    assert celery_tasks_waiting(redis_url, elsewhere) == []
    (sent,) = celery_tasks_waiting(redis_url, queue)
    assert (sent["task"], sent["id"]) == ("reports.build", str(message_of(benign).id))
    assert sent["dsched_host_id"] == str(HOST_B)  # the tenant, from the event, for the task
    dead_letter(hostile, "this route does not take the task from the data (TASK_FROM_DATA")


# -- in-process handlers and @periodic -----------------------------------------------------------
def test_the_operators_handler_never_runs_for_a_tenant(settings, mallory, handle):
    settings.DSCHED_TRANSPORTS = HANDLERS
    charged: list[str] = []
    handle(lambda event: charged.append(event["subject"]), topic="billing.charge")
    hostile = created(mallory, one_shot("billing.charge", data={"account": "operator"}))
    control = operators("billing.charge")

    deliver()

    assert charged == [str(control)]
    dead_letter(hostile, f"does not serve host {HOST_B}")
    delivered(control)


@pytest.fixture
def purge_job() -> Iterator[tuple[str, list[str]]]:
    """A @periodic job (its event type, the schedules it ran for), declared and synced."""
    kind = "secapp.dsched_schedules.purge_inactive_accounts"
    runs: list[str] = []

    def purge_inactive_accounts(event: dict) -> None:
        runs.append(event["subject"])

    declared.periodic(
        "purge-inactive",
        topic="ops",
        event_type=kind,
        every=1,
        unit="DAYS",
        start=datetime(2040, 1, 1, tzinfo=UTC),
    )(purge_inactive_accounts)
    try:
        declared.sync({"purge-inactive": declared._registry["purge-inactive"]})
        yield kind, runs
    finally:
        declared._registry.pop("purge-inactive", None)
        registry.unregister(purge_inactive_accounts, event_type=kind)


def test_a_periodic_job_runs_only_for_the_schedule_declared_for_it(settings, mallory, purge_job):
    settings.DSCHED_TRANSPORTS = HANDLERS
    kind, runs = purge_job
    hostile = created(mallory, one_shot("ops", event_type=kind))
    # Not even a schedule of the operator's own host names it: only the declared one.
    other = operators("ops", event_type=kind)
    declared_one = api.get("purge-inactive").schedule_id
    api.trigger(declared_one)

    deliver()

    assert runs == [str(declared_one)]
    why = "is the @periodic job 'purge-inactive''s: its function runs only for the schedule"
    dead_letter(hostile, why)
    dead_letter(other, why)
    delivered(declared_one)


# -- Django tasks -------------------------------------------------------------------------------
def test_a_django_task_of_the_operators_is_not_enqueued_for_a_tenant(settings, mallory):
    from tests.outbox.test_transports import immediate_backend

    settings.TASKS = {"default": {"BACKEND": immediate_backend()}}
    path = "tests.outbox.test_tenant_boundary.record_task"
    settings.DSCHED_TRANSPORTS = {
        "reports": {"BACKEND": "tasks", "OPTIONS": {"TASKS": {"report.build": path}}},
        **HANDLERS,
    }
    TASK_CALLS.clear()
    hostile = created_before_the_grants(mallory, settings, one_shot("reports", "report.build"))
    control = operators("reports", "report.build")

    deliver()

    assert [call["subject"] for call in TASK_CALLS] == [str(control)]
    dead_letter(hostile, not_granted("reports"))


# -- Redis --------------------------------------------------------------------------------------
def test_a_tenant_reaches_only_its_own_redis_streams(settings, mallory, redis_url):
    import redis

    prefix = f"t{uuid.uuid4().hex[:8]}"
    settings.DSCHED_TRANSPORTS = {
        "audit": {"BACKEND": "redis", "OPTIONS": {"URL": redis_url, "STREAM": prefix + ":{topic}"}},
        "*": {
            "BACKEND": "redis",
            "HOSTS": "*",
            "OPTIONS": {"URL": redis_url, "STREAM": prefix + ":tenants:{host}:{topic}"},
        },
    }
    hostile = created_before_the_grants(mallory, settings, one_shot("audit"))
    benign = created(mallory, one_shot("notes"))
    control = operators("audit")

    deliver()

    client = redis.Redis.from_url(redis_url)
    try:
        streams = {key.decode(): client.xlen(key) for key in client.scan_iter(prefix + ":*")}
    finally:
        client.close()
    assert streams == {f"{prefix}:audit": 1, f"{prefix}:tenants:{HOST_B}:notes": 1}
    dead_letter(hostile, not_granted("audit"))
    delivered(benign, control)


# -- RabbitMQ -----------------------------------------------------------------------------------
def test_a_topic_cannot_pick_a_rabbitmq_queue_on_the_default_exchange(
    settings,
    mallory,
    rabbitmq_url,
):
    import pika

    queue = f"operator-jobs-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = connection.channel()
    channel.queue_declare(queue)
    # The mistake dsched.E051 refuses: the default exchange names the queue by the topic, on a
    # route granted to every host.
    settings.DSCHED_TRANSPORTS = {
        "*": {"BACKEND": "rabbitmq", "HOSTS": "*", "OPTIONS": {"URL": rabbitmq_url}}
    }
    problems = [e for e in check_delivery_settings() if isinstance(e, Error)]
    assert [e.id for e in problems] == ["dsched.E051"], problems
    try:
        hostile = created_before_the_grants(mallory, settings, one_shot(queue))
        control = operators(queue)

        deliver()

        assert channel.queue_declare(queue, passive=True).method.message_count == 1
    finally:
        channel.queue_delete(queue)
        connection.close()
    dead_letter(hostile, f"{not_granted(queue)}: its route '*' in DSCHED_TRANSPORTS cannot")
    dead_letter(hostile, "dsched.E051")
    delivered(control)


# -- SQS ----------------------------------------------------------------------------------------
def test_a_slash_in_a_topic_never_reaches_another_sqs_queue(
    settings,
    mallory,
    sqs_endpoint,
    sqs_client,
):
    suffix = uuid.uuid4().hex[:8]
    victim = sqs_client.create_queue(QueueName=f"operator-{suffix}")["QueueUrl"]
    base = victim.rpartition("/")[0]
    operator_host = app_settings.DEFAULT_HOST_ID
    own = sqs_client.create_queue(QueueName=f"{operator_host}-ops{suffix}")["QueueUrl"]
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "sqs",
            "HOSTS": "*",
            "OPTIONS": {
                "QUEUE_URL": base + "/{host}-{topic}",
                "ENDPOINT_URL": sqs_endpoint,
                "REGION": REGION,
                "TIMEOUT": 2,
                **KEYS,
            },
        }
    }
    hostile = created(mallory, one_shot(f"x/operator-{suffix}"))
    control = operators(f"ops{suffix}")

    deliver()

    def count(url: str) -> int:
        attributes = sqs_client.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])

    assert (count(victim), count(own)) == (0, 1)
    dead_letter(hostile, f"'{HOST_B}-x%2Foperator-{suffix}' is not an SQS queue name")
    delivered(control)


# -- webhooks -----------------------------------------------------------------------------------
def test_the_operators_webhook_never_signs_a_tenants_data(settings, mallory, sink):
    settings.DSCHED_TRANSPORTS = {
        "billing.*": {
            "BACKEND": "webhook",
            "OPTIONS": {"URL": sink + "/hooks/operator/{topic}", "SECRET": "operator-secret"},
        },
        **HANDLERS,
    }
    hostile = created_before_the_grants(
        mallory, settings, one_shot("billing.refund", data={"amount": 10_000})
    )
    control = operators("billing.refund")

    deliver()

    assert [path for path, _, _ in Sink.requests] == ["/hooks/operator/billing.refund"]
    assert json.loads(Sink.requests[0][2])["subject"] == str(control)
    dead_letter(hostile, not_granted("billing.refund"))
