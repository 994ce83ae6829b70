"""The SQS transport against a real SQS-compatible server (moto's, tests/sqs_server.py),
through the relay: batches, body and attributes, FIFO deduplication and groups, refusals,
sizes, an endpoint that is down or silent, and the configuration check."""

from __future__ import annotations

import json
import socket
import time
import uuid
from datetime import UTC, datetime

import pytest

from django_dsched import api
from django_dsched.checks.delivery import check_delivery_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports.sqs import SQSTransport, entry_failure
from tests.brokers import free_port
from tests.outbox_helpers import DEFAULT_HOST, envelope_text, make_messages, statuses
from tests.sqs_server import KEYS, REGION


def new_queue(client, *, fifo: bool = False, **attributes: str) -> str:
    name = f"q{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
    if fifo:
        attributes["FifoQueue"] = "true"
    return client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def route(endpoint: str, queue_url: str, **options) -> dict:
    return {
        "*": {
            "BACKEND": "sqs",
            "OPTIONS": {
                "QUEUE_URL": queue_url,
                "ENDPOINT_URL": endpoint,
                "REGION": REGION,
                "TIMEOUT": 2,
                **KEYS,
                **options,
            },
        }
    }


def drain(client, queue_url: str) -> list[dict]:
    """Every message in the queue, received and deleted, in the order SQS hands them out."""
    received = []
    while True:
        reply = client.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        batch = reply.get("Messages", [])
        if not batch:
            return received
        received.extend(batch)
        client.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )


def attributes(received: dict) -> dict[str, str]:
    return {k: v["StringValue"] for k, v in received.get("MessageAttributes", {}).items()}


def fire(name: str) -> uuid.UUID:
    """Run a schedule now (the exactly-once path); its new outbox message's id."""
    if not Schedule.objects.filter(schedule_name=name).exists():
        api.create_interval(
            name,
            every=1,
            unit="DAYS",
            start=datetime(2030, 1, 1, tzinfo=UTC),
            topic="reports",
            event_type="report.build",
            data={"name": name},
        )
    before = set(OutboxMessage.objects.values_list("id", flat=True))
    api.trigger(name)
    (new,) = set(OutboxMessage.objects.values_list("id", flat=True)) - before
    return new


# -- delivery ----------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_relay_sends_batches_of_ten_each_message_once(settings, sqs_endpoint, sqs_client):
    queue_url = new_queue(sqs_client)
    settings.DSCHED_TRANSPORTS = route(sqs_endpoint, queue_url)
    ids = make_messages(25)
    relay = Relay(instance_id="r1", batch_size=100)
    calls: list[int] = []
    relay.transports.for_topic("reports", DEFAULT_HOST).client.meta.events.register(
        "before-parameter-build.sqs.SendMessageBatch",
        lambda params, **_: calls.append(len(params["Entries"])),
    )

    assert relay.run_until_idle() == 25

    # Batches of at most ten, each message in one; how a relay's concurrent runs cut 25
    # messages into batches depends on when each run starts (on a loaded machine, not
    # always [10, 10, 5]).
    assert sum(calls) == 25 and max(calls) <= 10 and len(calls) < 25, calls
    received = drain(sqs_client, queue_url)
    by_id = {attributes(m)["id"]: m for m in received}
    assert len(received) == 25 and set(by_id) == {str(i) for i in ids}
    rows = {str(r.id): r for r in OutboxMessage.objects.all()}
    for message_id, message in by_id.items():
        payload = rows[message_id].delivered_payload
        assert message["Body"] == envelope_text(message_id)
        assert json.loads(message["Body"]) == payload
        assert attributes(message) == {
            "id": message_id,
            "type": "report.build",
            "topic": "reports",
            "source": payload["source"],
            "subject": payload["subject"],
            "time": payload["time"],
            "scheduledtime": payload["scheduledtime"],
            "specversion": "1.0",
        }
        assert "MessageGroupId" not in message["Attributes"]  # a standard queue
    assert statuses() == {DeliveryStatus.DELIVERED: 25}


@pytest.mark.django_db(transaction=True)
def test_fifo_queue_groups_by_schedule_and_dedupes_on_the_message_id(
    settings,
    sqs_endpoint,
    sqs_client,
):
    queue_url = new_queue(sqs_client, fifo=True)
    settings.DSCHED_TRANSPORTS = route(sqs_endpoint, queue_url)
    fired = [fire("a"), fire("b"), fire("a"), fire("b")]  # two slots of each schedule
    assert Relay(instance_id="r1").run_until_idle() == 4

    # A relay that died between the send and recording it: the messages go out again, and
    # SQS drops the copies (same deduplication id, within its 5 minutes).
    OutboxMessage.objects.update(status=DeliveryStatus.PENDING, delivered_ts=None)
    assert Relay(instance_id="r2").run_until_idle() == 4

    received = drain(sqs_client, queue_url)
    assert sorted(attributes(m)["id"] for m in received) == sorted(str(i) for i in fired)
    fired_by = {"a": [fired[0], fired[2]], "b": [fired[1], fired[3]]}
    for name, expected in fired_by.items():
        group_id = str(api.get(name).schedule_id)
        group = [m for m in received if m["Attributes"]["MessageGroupId"] == group_id]
        assert [attributes(m)["id"] for m in group] == [str(i) for i in expected]  # fire order
    for message in received:
        assert message["Attributes"]["MessageDeduplicationId"] == attributes(message)["id"]
        assert attributes(message)["subject"] == message["Attributes"]["MessageGroupId"]
        assert "scheduledtime" in attributes(message)
        assert json.loads(message["Body"])["id"] == attributes(message)["id"]
    assert statuses() == {DeliveryStatus.DELIVERED: 4}


def test_body_is_the_envelope_and_a_bad_queue_name_fails_alone(sqs_endpoint, sqs_client):
    topic = f"t{uuid.uuid4().hex[:8]}"
    queue_url = sqs_client.create_queue(QueueName=topic)["QueueUrl"]
    template = queue_url.rpartition("/")[0] + "/{topic}"
    transport = SQSTransport(
        QUEUE_URL=template, ENDPOINT_URL=sqs_endpoint, REGION=REGION, TIMEOUT=2, **KEYS
    )
    payload = {"specversion": "1.0", "id": "x", "data": {"text": "h\u00e9 \uffff \U0001f600 <&>"}}
    good = Message(uuid.uuid4(), topic, "report.build", payload, 1)
    dotted = Message(uuid.uuid4(), "billing.eu", "report.build", payload, 1)
    try:
        sent, refused = transport.send_many([good, dotted])
    finally:
        transport.close()

    assert sent is None
    assert isinstance(refused, PermanentDeliveryError)
    assert "'billing.eu' is not an SQS queue name" in str(refused)
    (message,) = drain(sqs_client, queue_url)
    assert json.loads(message["Body"]) == payload  # U+FFFF travels as a JSON escape
    assert "\\uffff" in message["Body"] and "\u00e9" in message["Body"]


# -- failures ----------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_deleted_queue_is_a_failed_attempt_then_delivered(settings, sqs_endpoint, sqs_client):
    queue_url = new_queue(sqs_client)
    sqs_client.delete_queue(QueueUrl=queue_url)
    settings.DSCHED_TRANSPORTS = route(sqs_endpoint, queue_url)
    make_messages(3)

    assert Relay(instance_id="r1").run_until_idle() == 0

    rows = list(OutboxMessage.objects.all())
    assert all(r.status == DeliveryStatus.PENDING and r.attempts == 1 for r in rows)
    assert {r.last_error for r in rows} == {
        f"DeliveryError: SQS refused the send to {queue_url}: QueueDoesNotExist: "
        "The specified queue does not exist."
    }

    sqs_client.create_queue(QueueName=queue_url.rpartition("/")[2])
    OutboxMessage.objects.update(next_attempt_ts=None)  # the retry is due
    assert Relay(instance_id="r1").run_until_idle() == 3
    assert len(drain(sqs_client, queue_url)) == 3


@pytest.mark.django_db(transaction=True)
def test_an_oversize_message_is_dead_lettered_at_once_alone(settings, sqs_endpoint, sqs_client):
    queue_url = new_queue(sqs_client)
    settings.DSCHED_TRANSPORTS = route(sqs_endpoint, queue_url)
    small, large, other = make_messages(3)
    Event.objects.filter(id=large).update(payload={"id": str(large), "blob": "x" * 300_000})

    assert Relay(instance_id="r1").run_until_idle() == 2

    row = OutboxMessage.objects.get(id=large)
    assert row.status == DeliveryStatus.DELIVERY_FAILED and row.attempts == 1
    assert row.last_error.startswith("PermanentDeliveryError: the message is 300,")
    assert "over MAX_MESSAGE_BYTES (262,144)" in row.last_error
    assert sorted(attributes(m)["id"] for m in drain(sqs_client, queue_url)) == sorted(
        [str(small), str(other)]
    )


@pytest.mark.django_db(transaction=True)
def test_a_message_the_queue_refuses_fails_alone(settings, sqs_endpoint, sqs_client):
    """A queue whose MaximumMessageSize is under MAX_MESSAGE_BYTES: moto refuses the whole
    batch for the one message, the transport sends each alone, and only that one fails."""
    queue_url = new_queue(sqs_client, MaximumMessageSize="1024")
    settings.DSCHED_TRANSPORTS = route(sqs_endpoint, queue_url)
    small, large, other = make_messages(3)
    Event.objects.filter(id=large).update(payload={"id": str(large), "blob": "x" * 2000})

    assert Relay(instance_id="r1").run_until_idle() == 2

    row = OutboxMessage.objects.get(id=large)
    assert row.status == DeliveryStatus.DELIVERY_FAILED and row.attempts == 1
    assert row.last_error == (
        f"PermanentDeliveryError: SQS refused the send to {queue_url}: InvalidParameterValue: "
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."
    )
    assert sorted(attributes(m)["id"] for m in drain(sqs_client, queue_url)) == sorted(
        [str(small), str(other)]
    )


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_that_is_down_is_a_failed_attempt(settings):
    queue_url = f"http://127.0.0.1:{free_port()}/123456789012/q"  # nothing listens there
    settings.DSCHED_TRANSPORTS = route(queue_url.rsplit("/", 2)[0], queue_url)
    make_messages(3)

    assert Relay(instance_id="r1").run_until_idle() == 0

    rows = list(OutboxMessage.objects.all())
    assert all(r.status == DeliveryStatus.PENDING and r.attempts == 1 for r in rows)
    assert all("EndpointConnectionError: Could not connect" in r.last_error for r in rows)


@pytest.mark.django_db(transaction=True)
def test_a_silent_endpoint_fails_the_batch_after_timeout_once(settings):
    """A server that takes the connection and never answers: the first call times out after
    TIMEOUT, and the batch's other calls (the relay hands the transport 10 at a time) fail
    with it without waiting again."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes connections; nobody ever reads or answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        settings.DSCHED_TRANSPORTS = route(endpoint, f"{endpoint}/123456789012/q", TIMEOUT=1)
        # One call at a time (the relay would send the three at once, each waiting once).
        settings.DSCHED_TRANSPORTS["*"]["CONCURRENCY"] = 1
        make_messages(25)  # three calls' worth
        relay = Relay(instance_id="r1", batch_size=100)
        relay.transports.for_topic("reports", DEFAULT_HOST)  # boto3's client built beforehand

        started = time.monotonic()
        assert relay.run_until_idle() == 0
        elapsed = time.monotonic() - started

    assert 1 <= elapsed < 2.9, elapsed  # three calls waiting each would take 3 s
    rows = list(OutboxMessage.objects.all())
    assert all(r.status == DeliveryStatus.PENDING and r.attempts == 1 for r in rows)
    assert all("ReadTimeoutError" in r.last_error and "(TIMEOUT 1s)" in r.last_error for r in rows)
    assert (
        sum(r.last_error.startswith("DeliveryError: not sent: the endpoint failed") for r in rows)
        == 15
    )


def test_failed_entries_of_a_reply_are_permanent_only_when_the_message_is_refused():
    """SQS's reply lists each refused entry with its code and whose fault it is."""
    refused = entry_failure(
        {"Id": "m0", "SenderFault": True, "Code": "InvalidMessageContents", "Message": "bad"}, "u"
    )
    assert isinstance(refused, PermanentDeliveryError)
    assert str(refused) == "SQS refused the message for u: InvalidMessageContents: bad"
    for entry in (
        {"Id": "m0", "SenderFault": False, "Code": "InternalError", "Message": "try again"},
        {"Id": "m0", "SenderFault": True, "Code": "RequestThrottled", "Message": "slow down"},
    ):
        error = entry_failure(entry, "u")
        assert type(error) is DeliveryError


# -- configuration -----------------------------------------------------------------------------
AWS_QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/reports"


def test_a_good_configuration_passes_the_system_check(settings):
    settings.DSCHED_TRANSPORTS = {
        "*": {"BACKEND": "handlers"},
        "reports": {"BACKEND": "sqs", "OPTIONS": {"QUEUE_URL": AWS_QUEUE}},
        "billing.*": {
            "BACKEND": "sqs",
            "OPTIONS": {
                "QUEUE_URL": "http://localhost:9324/000000000000/{type}.fifo",
                "ENDPOINT_URL": "http://localhost:9324",
                "REGION": "elasticmq",
                "MESSAGE_GROUP_ID": "{topic}/{schedule}",
                "MAX_MESSAGE_BYTES": 1024 * 1024,
                "TIMEOUT": 5,
                **KEYS,
            },
        },
    }
    assert check_delivery_settings() == []


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "QUEUE_URL (a string) is required"),
        ({"QUEUE_URL": "sqs://reports"}, "is not an http(s) URL"),
        ({"QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/reports"}, "is not a queue's URL"),
        ({"QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/{topic}/q"}, "only in the queue's"),
        ({"QUEUE_URL": AWS_QUEUE + ".v2"}, "'reports.v2' is not an SQS queue name"),
        ({"QUEUE_URL": "http://localhost:9324/0/q", "REGION": "x"}, "set ENDPOINT_URL"),
        ({"QUEUE_URL": AWS_QUEUE, "ENDPOINT_URL": "localhost:9324"}, "ENDPOINT_URL 'localhost"),
        ({"QUEUE_URL": AWS_QUEUE, "REGION": "us-east-1"}, "is not the region of QUEUE_URL"),
        ({"QUEUE_URL": AWS_QUEUE, "ACCESS_KEY_ID": "AKIA"}, "give ACCESS_KEY_ID and SECRET"),
        ({"QUEUE_URL": AWS_QUEUE, "TIMEOUT": 0}, "TIMEOUT must be a positive number"),
        ({"QUEUE_URL": AWS_QUEUE, "TIMEOUT": 15}, "less than a quarter of"),
        ({"QUEUE_URL": AWS_QUEUE, "MAX_MESSAGE_BYTES": 2 * 1024 * 1024}, "MAX_MESSAGE_BYTES"),
        ({"QUEUE_URL": AWS_QUEUE, "MESSAGE_GROUP_ID": "{tenant}"}, "the placeholders are"),
        ({"QUEUE_URL": AWS_QUEUE, "MESSAGE_GROUP_ID": "a b"}, "letters, digits and punctuation"),
        ({"QUEUE_URL": AWS_QUEUE, "QUEUE": "x"}, "unknown option(s) QUEUE"),
    ],
)
def test_configuration_errors_are_reported_by_the_system_check(settings, options, problem):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "sqs", "OPTIONS": options}}
    errors = check_delivery_settings()
    assert [e.id for e in errors] == ["dsched.E007"]
    assert problem in errors[0].msg


def test_a_region_is_required_when_nothing_gives_one(settings, monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    options = {"QUEUE_URL": "http://localhost:9324/0/q", "ENDPOINT_URL": "http://localhost:9324"}
    assert any("no region" in p for p in SQSTransport.check_options(options))
    assert SQSTransport.check_options({**options, "REGION": "elasticmq"}) == []
