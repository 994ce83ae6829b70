"""Redis Streams and RabbitMQ transports against real servers, through the relay."""

from __future__ import annotations

import json
import socket
import uuid
from urllib.parse import urlsplit

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports.base import encode
from django_dsched.outbox.transports.rabbitmq import RabbitMQTransport
from django_dsched.outbox.transports.redis_streams import RedisStreamsTransport
from tests.brokers import free_port
from tests.outbox_helpers import make_messages, statuses
from tests.tcp_proxy import TcpProxy


def message(topic: str = "reports") -> Message:
    id_ = uuid.uuid4()
    return Message(id_, topic, "report.build", {"id": str(id_), "data": {"n": 1}}, 1)


# -- Redis Streams ---------------------------------------------------------------------------
@pytest.fixture
def redis_client(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.mark.django_db(transaction=True)
def test_relay_delivers_to_redis_streams(settings, redis_url, redis_client):
    settings.DSCHED_TRANSPORTS = {
        "*": {"BACKEND": "redis", "OPTIONS": {"URL": redis_url, "MAXLEN": 10_000}}
    }
    ids = make_messages(250, topic="reports") + make_messages(3, topic="billing")

    assert Relay(instance_id="r1", batch_size=100).run_until_idle() == 253

    entries = redis_client.xrange("dsched:reports")
    assert [e[1][b"id"].decode() for e in entries] == [str(i) for i in ids[:250]]
    fields = entries[0][1]
    assert fields[b"topic"] == b"reports" and fields[b"type"] == b"report.build"
    event = json.loads(fields[b"event"])
    assert event["id"] == str(ids[0]) and event["specversion"] == "1.0"
    assert redis_client.xlen("dsched:billing") == 3
    assert statuses() == {DeliveryStatus.DELIVERED: 253}


@pytest.mark.django_db(transaction=True)
def test_redis_down_is_a_retryable_failure(settings):
    port = free_port()  # nothing listens there
    settings.DSCHED_TRANSPORTS = {
        "*": {
            "BACKEND": "redis",
            "OPTIONS": {"URL": f"redis://127.0.0.1:{port}/0", "SOCKET_TIMEOUT": 1},
        }
    }
    make_messages(3)

    assert Relay(instance_id="r1").run_until_idle() == 0

    rows = OutboxMessage.objects.all()
    assert all(r.status == DeliveryStatus.PENDING and r.attempts == 1 for r in rows)
    assert all("ConnectionError" in r.last_error for r in rows)


def test_redis_stream_name_template(redis_url, redis_client):
    transport = RedisStreamsTransport(URL=redis_url, STREAM="events.{topic}.{type}")
    try:
        transport.send(message("billing"))
    finally:
        transport.close()
    assert redis_client.xlen("events.billing.report.build") == 1


def test_a_redis_batch_is_one_write_and_each_reply_is_its_messages_outcome(
    redis_url,
    redis_client,
):
    """A batch goes in one write; its entries are what a single XADD writes, and a message
    whose command cannot be made (an event that is not JSON) or that Redis refuses (a stream
    name that holds a string) fails alone. A connection the server closed between batches
    is replaced, and the next batch is sent."""
    redis_client.set("dsched:taken", "not a stream")
    transport = RedisStreamsTransport(URL=redis_url, MAXLEN=1000)
    unwritable = message("reports")
    unwritable.payload["data"] = {1, 2}  # a set: json.dumps refuses it
    batch = [message("reports"), message("taken"), unwritable, message("reports")]
    batch.append(message("billing"))
    try:
        results = transport.send_many(batch)
        transport.send(message("reports"))  # one message, outside a batch
        again = transport.send_many([message("reports"), message("billing")])
        redis_client.client_kill_filter(_type="normal", skipme=True)  # the transport's
        after_kill = transport.send_many([message("billing"), message("billing")])
    finally:
        transport.close()

    assert [type(r).__name__ for r in results] == [
        "NoneType",
        "ResponseError",
        "TypeError",
        "NoneType",
        "NoneType",
    ]
    assert "WRONGTYPE" in str(results[1])
    assert again == [None, None]  # the connection was left in step: replies all read
    assert after_kill == [None, None]
    entries = redis_client.xrange("dsched:reports")
    assert [e[1][b"id"].decode() for e in entries[:2]] == [str(batch[0].id), str(batch[3].id)]
    by_batch, alone = entries[0][1], entries[2][1]
    assert list(by_batch) == list(alone) == [b"id", b"topic", b"type", b"event"]
    by_hand = by_batch
    assert json.loads(by_hand[b"event"]) == batch[0].payload
    assert (
        by_hand[b"event"]
        == json.dumps(batch[0].payload, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert redis_client.xlen("dsched:reports") == 4
    assert redis_client.xlen("dsched:billing") == 4


class RepliesCut(TcpProxy):
    """A proxy in front of Redis that, once told :meth:`cut` ``n``, passes on the server's
    next ``n`` replies of two lines (an ``XADD``'s: the entry's id as a bulk string) and
    then drops the connection, as a server dying mid-batch would."""

    lines: int | None = None  # the line ends still passed on; None: all
    last = 0

    def cut(self, replies: int) -> None:
        self.lines = 2 * replies

    def _answer(self, source: socket.socket, sink: socket.socket) -> None:
        self._pump(source, sink, self._passed)

    def _passed(self, data: bytes) -> tuple[bytes, bool]:
        if self.lines is None:
            return data, True
        for end, byte in enumerate(data):
            if self.last == ord("\r") and byte == ord("\n"):
                self.lines -= 1
            self.last = byte
            if self.lines == 0:
                self.lines = None
                return data[: end + 1], False
        return data, True


def test_a_redis_connection_lost_mid_batch_fails_only_what_was_not_answered(
    redis_url, redis_client
):
    """The messages Redis answered before the connection dropped are sent; the others fail
    with the connection's error (the relay sends them again, with the same ids), and the
    next batch goes on a new connection."""
    import redis

    proxy = RepliesCut(("127.0.0.1", urlsplit(redis_url).port)).start()
    transport = RedisStreamsTransport(URL=f"redis://127.0.0.1:{proxy.port}/0")
    try:
        assert transport.send_many([message("cut"), message("cut")]) == [None, None]
        proxy.cut(3)
        batch = [message("cut") for _ in range(6)]
        results = transport.send_many(batch)
        again = transport.send_many([message("cut"), message("cut")])
    finally:
        transport.close()
        proxy.stop()

    assert results[:3] == [None, None, None]
    assert all(isinstance(r, redis.ConnectionError) for r in results[3:]), results
    assert again == [None, None]
    ids = [e[1][b"id"].decode() for e in redis_client.xrange("dsched:cut")]
    assert ids[2:5] == [str(m.id) for m in batch[:3]]


def test_a_redis_batch_interrupted_between_replies_leaves_no_reply_for_the_next(
    redis_url, redis_client, monkeypatch
):
    """A batch larger than one write goes in pieces; one interrupted while its replies are
    read (an exception that is not an error: a timeout of gevent's, an interrupt) leaves no
    reply behind on a pooled connection: the next batch reads its own replies."""
    from redis.connection import Connection

    from django_dsched.outbox.transports.redis_streams import WRITE_BYTES

    redis_client.set("dsched:taken", "not a stream")
    transport = RedisStreamsTransport(URL=redis_url)
    send = Connection.send_packed_command
    writes: list[int] = []

    def sent(self, command, *args, **kwargs):
        writes.extend(len(piece) for piece in command if b"XADD" in piece)
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_packed_command", sent)
    try:
        large = [message("large") for _ in range(700)]  # about 150 KB
        assert transport.send_many(large) == [None] * 700
        large_writes = writes[:]
        read = Connection.read_response
        calls = []

        def interrupted(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return read(self, *args, **kwargs)

        monkeypatch.setattr(Connection, "read_response", interrupted)
        with pytest.raises(KeyboardInterrupt):
            transport.send_many([message("reports") for _ in range(3)])
        monkeypatch.setattr(Connection, "read_response", read)
        after = transport.send_many([message("taken"), message("reports")])
    finally:
        transport.close()

    assert redis_client.xlen("dsched:large") == 700
    largest = max(len(transport.pack(transport.command(m))) for m in large)
    assert sum(large_writes) > 2 * WRITE_BYTES  # in pieces of about WRITE_BYTES
    assert all(WRITE_BYTES <= n < WRITE_BYTES + largest for n in large_writes[:-1])
    assert len(large_writes) == 3, large_writes
    assert [type(r).__name__ for r in after] == ["ResponseError", "NoneType"]


def test_the_redis_options_check_names_what_is_missing_or_wrong(monkeypatch):
    """The system check says what to fix: a MAXLEN that is not a positive whole number, a
    redis-py older than 5.3 (its pool's get_connection() wants arguments)."""
    from django_dsched.outbox.transports import redis_streams

    assert RedisStreamsTransport.check_options({"URL": "redis://localhost/0"}) == []
    assert RedisStreamsTransport.check_options({"MAXLEN": True}) == [
        "MAXLEN must be a positive whole number or None"
    ]
    monkeypatch.setattr(redis_streams, "version", lambda name: "5.2.1")
    assert RedisStreamsTransport.check_options({}) == [
        "needs redis-py 5.3 or later: pip install 'django-dsched[redis]'"
    ]


@pytest.mark.parametrize("maxlen", [None, 1000])
def test_a_redis_command_is_what_redis_pys_xadd_sends(maxlen):
    """The transport builds each XADD itself (a relay sends thousands a second): the same
    arguments, byte for byte, as redis-py's ``xadd`` with approximate trimming."""
    import redis

    sent: list[tuple[object, ...]] = []

    class Recording(redis.Redis):
        def execute_command(self, *args, **options):
            sent.append(args)

    transport = RedisStreamsTransport(URL="redis://localhost:1/0", MAXLEN=maxlen)
    try:
        one = message("reports")
        Recording().xadd(
            "dsched:reports",
            {"id": str(one.id), "topic": one.topic, "type": one.event_type, "event": encode(one)},
            maxlen=maxlen,
            approximate=True,
        )
        assert wire(transport.command(one)) == wire(sent[0])
    finally:
        transport.close()


def wire(args: tuple[object, ...]) -> list[bytes]:
    """Command arguments as Redis receives them."""
    return [a if isinstance(a, bytes) else str(a).encode() for a in args]


# -- RabbitMQ --------------------------------------------------------------------------------
@pytest.fixture
def amqp_channel(rabbitmq_url):
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = connection.channel()
    yield channel
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_relay_delivers_to_rabbitmq_with_confirms(settings, rabbitmq_url, amqp_channel):
    queue = f"reports-{uuid.uuid4().hex[:8]}"
    amqp_channel.queue_declare(queue, durable=True)
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "rabbitmq", "OPTIONS": {"URL": rabbitmq_url}}}
    ids = make_messages(20, topic=queue)

    assert Relay(instance_id="r1").run_until_idle() == 20

    received = []
    while True:
        method, properties, body = amqp_channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        received.append((properties, json.loads(body)))
    assert [p.message_id for p, _ in received] == [str(i) for i in ids]
    properties, event = received[0]
    assert properties.type == "report.build" and properties.delivery_mode == 2
    assert properties.content_type == "application/cloudevents+json"
    assert event["id"] == str(ids[0])
    assert statuses() == {DeliveryStatus.DELIVERED: 20}


@pytest.mark.django_db(transaction=True)
def test_unroutable_rabbitmq_message_is_retried(settings, rabbitmq_url):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "rabbitmq", "OPTIONS": {"URL": rabbitmq_url}}}
    (message_id,) = make_messages(1, topic=f"no-queue-{uuid.uuid4().hex[:8]}")

    Relay(instance_id="r1").run_until_idle()

    row = OutboxMessage.objects.get(id=message_id)
    assert row.status == DeliveryStatus.PENDING and row.attempts == 1
    assert "no queue is bound" in row.last_error


def test_rabbitmq_reconnects_after_the_broker_drops_the_connection(
    rabbitmq_url,
    amqp_channel,
):
    queue = f"reconnect-{uuid.uuid4().hex[:8]}"
    amqp_channel.queue_declare(queue)
    transport = RabbitMQTransport(URL=rabbitmq_url)
    try:
        transport.send(message(queue))
        connection, _ = transport._clients.get()
        connection._impl._transport._sock.shutdown(socket.SHUT_RDWR)  # link lost
        transport.send(message(queue))
    finally:
        transport.close()
    assert amqp_channel.queue_declare(queue, passive=True).method.message_count == 2


def test_rabbitmq_down_is_a_connection_error():
    import pika

    transport = RabbitMQTransport(URL=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        transport.send(message())
    assert transport._clients.get() is None
