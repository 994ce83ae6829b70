"""Webhooks against hostile endpoints and hostile schedule fields (issue 9, items 1-5).

Every endpoint is local: a scripted HTTP sink, a TCP server that dribbles bytes, and a stub
resolver (``DSCHED_WEBHOOK_RESOLVER``) that maps test names to addresses.
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import quote

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from django_dsched.outbox.messages import Message
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.transports import DeliveryError, PermanentDeliveryError
from django_dsched.outbox.transports.registry import config_problems
from django_dsched.outbox.transports.webhook import WebhookTransport
from tests.helpers import sql
from tests.outbox_helpers import make_messages
from tests.webhook_servers import Sink, StubResolver, dribbling_server, serve_sink

# How much later than its TIMEOUT a send may end (scheduling noise on a shared machine).
SLACK = 1.5


def message(topic: str = "reports", event_type: str = "report.build") -> Message:
    id_ = uuid.uuid4()
    return Message(id_, topic, event_type, {"id": str(id_), "type": event_type}, 1)


@pytest.fixture
def resolver(settings):
    """A stub resolver installed as DSCHED_WEBHOOK_RESOLVER; fill ``resolver.names``."""
    stub = StubResolver({})
    settings.DSCHED_WEBHOOK_RESOLVER = stub
    return stub


@pytest.fixture
def loopback(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    return settings


# -- 1. TIMEOUT is a deadline for the whole exchange ----------------------------------------
HEADERS_DRIBBLE = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000
# A TLS handshake record announcing 16 KiB, sent a byte at a time.
TLS_DRIBBLE = b"\x16\x03\x03\x40\x00" + b"\x02" * 10_000


@pytest.mark.parametrize(
    ("scheme", "reply"), [("http", HEADERS_DRIBBLE), ("https", TLS_DRIBBLE)], ids=["headers", "tls"]
)
def test_a_dribbling_server_cannot_hold_a_send_past_its_timeout(loopback, scheme, reply):
    with dribbling_server(reply, every=0.2) as port:
        transport = WebhookTransport(URL=f"{scheme}://127.0.0.1:{port}/in", TIMEOUT=1.0)
        started = time.monotonic()
        with pytest.raises(DeliveryError, match="timed out") as failure:
            transport.send(message())
        elapsed = time.monotonic() - started
        transport.close()
    assert not isinstance(failure.value, PermanentDeliveryError)
    assert elapsed < 1.0 + SLACK, f"the send took {elapsed:.1f}s with TIMEOUT = 1s"


def test_a_dribbled_body_ends_by_the_deadline(loopback):
    reply = b"HTTP/1.1 500 Oops\r\nContent-Length: 10000\r\n\r\n" + b"x" * 10_000
    with dribbling_server(reply, every=0.01) as port:
        transport = WebhookTransport(URL=f"http://127.0.0.1:{port}/in", TIMEOUT=1.0)
        started = time.monotonic()
        with pytest.raises(DeliveryError, match="HTTP 500"):
            transport.send(message())
        elapsed = time.monotonic() - started
        transport.close()
    assert elapsed < 1.0 + SLACK


def test_slow_name_resolution_counts_against_the_deadline(loopback, resolver):
    resolver.names["slow-dns.test"] = ["127.0.0.1"]
    resolver.delay = 5.0
    loopback.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["slow-dns.test"]
    transport = WebhookTransport(URL="http://slow-dns.test:9/in", TIMEOUT=1.0)
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="timed out"):
        transport.send(message())
    assert time.monotonic() - started < 1.0 + SLACK


@pytest.mark.django_db(transaction=True)
def test_the_relay_goes_on_after_a_dribbling_endpoint(loopback, sink):
    with dribbling_server(HEADERS_DRIBBLE, every=0.2) as port:
        loopback.DSCHED_TRANSPORTS = {
            "hostile": {
                "BACKEND": "webhook",
                "OPTIONS": {"URL": f"http://127.0.0.1:{port}/in", "TIMEOUT": 1},
            },
            "*": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/ok/{topic}", "TIMEOUT": 1}},
        }
        (hostile,) = make_messages(1, topic="hostile")
        fine = make_messages(3, topic="fine")
        started = time.monotonic()
        delivered = Relay(instance_id="r1").run_until_idle()
        elapsed = time.monotonic() - started

    assert delivered == 3
    assert elapsed < 1.0 + SLACK + 1.0  # one timed-out send, three quick ones, SQL
    row = OutboxMessage.objects.get(id=hostile)
    assert row.status == DeliveryStatus.PENDING and "timed out" in row.last_error
    assert set(OutboxMessage.objects.filter(id__in=fine).values_list("status", flat=True)) == {
        DeliveryStatus.DELIVERED
    }


# -- 2. credentials never go to another origin ----------------------------------------------
def test_a_redirect_to_another_origin_is_not_followed(loopback):
    with serve_sink() as a, serve_sink() as b:
        Sink.requests = []
        target = quote(b + "/ok/stolen", safe="")
        transport = WebhookTransport(
            URL=f"{a}/redirect-to?url={target}",
            SECRET="s3cret",
            HEADERS={"Authorization": "Bearer t0ken"},
            TIMEOUT=2,
        )
        with pytest.raises(PermanentDeliveryError, match="another origin") as failure:
            transport.send(message())
        transport.close()
    b_host = b.removeprefix("http://")
    assert [p for p, h, _ in Sink.requests if h["Host"] == b_host] == []
    assert b in str(failure.value)  # the operator sees where the endpoint moved


@pytest.mark.parametrize(
    "target",
    ["http://{b}/ok", "https://{a}/ok", "http://localhost:{a_port}/ok"],
    ids=["other-port", "other-scheme", "other-name-same-address"],
)
def test_any_change_of_scheme_host_or_port_is_another_origin(loopback, resolver, target):
    resolver.names["localhost"] = ["127.0.0.1"]
    loopback.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    with serve_sink() as a, serve_sink() as b:
        Sink.requests = []
        a_host, b_host = a.removeprefix("http://"), b.removeprefix("http://")
        location = target.format(a=a_host, b=b_host, a_port=a_host.rsplit(":", 1)[1])
        transport = WebhookTransport(
            URL=f"{a}/redirect-to?url={quote(location, safe='')}", HEADERS={"Authorization": "x"}
        )
        with pytest.raises(PermanentDeliveryError, match="another origin"):
            transport.send(message())
        transport.close()
    assert [p for p, _, _ in Sink.requests] == [Sink.requests[0][0]]  # only the first POST


def test_a_same_origin_redirect_keeps_its_headers(loopback, sink):
    transport = WebhookTransport(
        URL=sink + "/redirect-in", SECRET="s3cret", HEADERS={"Authorization": "Bearer t0ken"}
    )
    transport.send(message())
    transport.close()
    (_, first, body), (path, second, same_body) = Sink.requests
    assert path == "/ok/after-redirect" and same_body == body
    assert second["Authorization"] == "Bearer t0ken"
    assert second["X-Dsched-Signature"] == first["X-Dsched-Signature"]


# -- 3. placeholders are percent-encoded ----------------------------------------------------
@pytest.mark.parametrize(
    ("template", "topic", "event_type", "path"),
    [
        ("/hooks/{topic}", "a/../../v1/admin/users", "t",
         "/hooks/a%2F..%2F..%2Fv1%2Fadmin%2Fusers"),
        ("/hooks/{topic}", "x?admin=1#frag", "t", "/hooks/x%3Fadmin%3D1%23frag"),
        ("/hooks/{topic}", "a b%2Fc", "t", "/hooks/a%20b%252Fc"),
        ("/hooks/{type}", "t", "../admin", "/hooks/..%2Fadmin"),
        ("/hooks/{event_type}", "t", "a/b", "/hooks/a%2Fb"),
        ("/hooks/in?topic={topic}", "a&admin=1", "t", "/hooks/in?topic=a%26admin%3D1"),
        ("/hooks/{topic}.json", "billing.eu", "t", "/hooks/billing.eu.json"),
    ],
)  # fmt: skip
def test_schedule_fields_cannot_leave_their_placeholder(sink, template, topic, event_type, path):
    transport = WebhookTransport(URL=sink + template)
    transport.send(message(topic, event_type))
    transport.close()
    assert [p for p, _, _ in Sink.requests] == [path]


@pytest.mark.parametrize("topic", ["..", "."])
def test_a_field_that_would_be_a_dot_segment_is_refused(sink, topic):
    transport = WebhookTransport(URL=sink + "/hooks/{topic}/in")
    with pytest.raises(PermanentDeliveryError, match="dot segment"):
        transport.send(message(topic))
    transport.close()
    assert Sink.requests == []


def test_placeholders_outside_the_path_and_query_are_a_configuration_error(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = [".hooks.example.com"]
    config = {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://{topic}.hooks.example.com/"}}}
    assert any("only in the path and query" in p for p in config_problems(config))


# -- 4. addresses are checked at connect time -----------------------------------------------
# (host as written in the URL, addresses the stub resolver gives for it, or None for a literal)
REFUSED_TARGETS = [
    ("127.0.0.1", None),
    ("127.1", None),
    ("0x7f000001", None),
    ("2130706433", None),
    ("0177.0.0.1", None),
    ("0x7f.0.0.1", None),
    ("127.255.255.254", None),
    ("[::1]", None),
    ("[::ffff:127.0.0.1]", None),
    ("[::ffff:7f00:1]", None),
    ("[::127.0.0.1]", None),
    ("[64:ff9b::7f00:1]", None),
    ("[2002:7f00:1::]", None),
    ("169.254.169.254", None),
    ("[fe80::1]", None),
    ("10.0.0.1", None),
    ("012.0.0.1", None),
    ("172.16.0.1", None),
    ("172.31.255.254", None),
    ("192.168.1.1", None),
    ("3232235777", None),
    ("100.64.0.1", None),
    ("100.100.100.200", None),
    ("[fc00::1]", None),
    ("[fd00:ec2::254]", None),
    ("0.0.0.0", None),
    ("0", None),
    ("[::]", None),
    ("224.0.0.1", None),
    ("[ff02::1]", None),
    ("255.255.255.255", None),
    ("240.0.0.1", None),
    ("198.18.0.1", None),
    ("metadata.google.internal", ["169.254.169.254"]),
    ("metadata.azure.test", ["::ffff:169.254.169.254"]),
    ("localtest.test", ["127.0.0.1"]),
    ("intranet.test", ["10.1.2.3"]),
    ("ula.test", ["fd12:3456::1"]),
    ("scoped.test", ["fe80::1%1"]),
    ("mixed.test", ["93.184.216.34", "192.168.0.10"]),
]


@pytest.mark.parametrize(("host", "addresses"), REFUSED_TARGETS)
def test_private_and_special_addresses_are_refused(settings, resolver, sink, host, addresses):
    assert len(REFUSED_TARGETS) >= 30
    port = sink.rsplit(":", 1)[1]
    bare = host.strip("[]")
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = [host if host.startswith("[") else bare]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = []  # the safe default
    if addresses:
        resolver.names[bare] = addresses
    transport = WebhookTransport(URL=f"http://{host}:{port}/ok", TIMEOUT=0.5)
    with pytest.raises(PermanentDeliveryError, match="refused to connect"):
        transport.send(message())
    transport.close()
    assert Sink.requests == []
    if addresses is None:
        assert resolver.calls == []  # a literal is never handed to a resolver


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "11.0.0.1",
     "192.169.0.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"],
)  # fmt: skip
def test_public_addresses_pass_the_check(address):
    from django_dsched.outbox.transports.addresses import parse_address, refusal

    assert refusal(parse_address(address), ()) is None


def test_an_allowed_name_goes_to_the_checked_address_with_its_own_host_header(
    settings, resolver, sink
):
    port = sink.rsplit(":", 1)[1]
    resolver.names["hooks.partner.test"] = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.partner.test"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    transport = WebhookTransport(URL=f"http://hooks.partner.test:{port}/ok/in")
    transport.send(message())
    transport.send(message())
    transport.close()
    assert [h["Host"] for _, h, _ in Sink.requests] == [f"hooks.partner.test:{port}"] * 2
    # One resolution per connection (the sink closes each), and the connection went to the
    # address that was checked: there is no second lookup for a rebinding DNS to answer.
    assert resolver.calls == ["hooks.partner.test"] * 2


def test_allowed_networks_open_only_what_they_name(settings, resolver, sink):
    port = sink.rsplit(":", 1)[1]
    resolver.names["hooks.partner.test"] = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["hooks.partner.test"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.2/32", "10.0.0.0/8"]
    transport = WebhookTransport(URL=f"http://hooks.partner.test:{port}/ok/in")
    with pytest.raises(PermanentDeliveryError, match=r"127\.0\.0\.1.*loopback"):
        transport.send(message())
    transport.close()
    assert Sink.requests == []


def test_a_literal_private_url_is_a_configuration_error(settings):
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["10.0.0.5"]
    config = {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "http://10.0.0.5/in"}}}
    assert any("DSCHED_WEBHOOK_ALLOWED_NETWORKS" in p for p in config_problems(config))
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/24"]
    assert config_problems(config) == []


# -- 5. Retry-After, 410, the response cap -------------------------------------------------
def next_attempt_in(message_id: uuid.UUID) -> float:
    ((delay,),) = sql(
        "SELECT extract(epoch FROM next_attempt_ts - clock_timestamp()) FROM outbox_message_t "
        "WHERE id = %s",
        [message_id],
    )
    return float(delay)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("query", "retry_max", "low", "high"),
    [
        ("seconds=120", 600.0, 110, 121),
        ("seconds=120&status=429", 600.0, 110, 121),
        ("date-in=90", 600.0, 80, 91),
        ("seconds=100000", 300.0, 280, 301),  # bounded by DSCHED_RELAY_RETRY_MAX
        ("seconds=0", 600.0, 0, 2.1),  # never sooner than the relay's own backoff (1-2 s)
    ],
)
def test_retry_after_sets_the_next_attempt_within_the_backoff_bounds(
    settings, sink, query, retry_max, low, high
):
    settings.DSCHED_RELAY_RETRY_BASE = 2.0
    settings.DSCHED_RELAY_RETRY_MAX = retry_max
    settings.DSCHED_TRANSPORTS = {
        "*": {"BACKEND": "webhook", "OPTIONS": {"URL": f"{sink}/retry-after?{query}"}}
    }
    (message_id,) = make_messages(1)
    Relay(instance_id="r1").run_until_idle()
    row = OutboxMessage.objects.get(id=message_id)
    assert row.status == DeliveryStatus.PENDING
    delay = next_attempt_in(message_id)
    assert low <= delay <= high, delay
    if query == "seconds=0":
        assert delay >= 0.9  # the jittered backoff of attempt 1 is at least half of 2 s


@pytest.mark.django_db(transaction=True)
def test_410_gone_dead_letters_at_once_even_with_retry_after(settings, sink):
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": sink + "/gone"}}}
    (message_id,) = make_messages(1)
    Relay(instance_id="r1").run_until_idle()
    row = OutboxMessage.objects.get(id=message_id)
    assert row.status == DeliveryStatus.DELIVERY_FAILED and row.attempts == 1
    assert "HTTP 410" in row.last_error and row.next_attempt_ts is None


def test_an_endless_response_is_read_only_up_to_the_cap(loopback):
    chunk = b"400\r\n" + b"y" * 1024 + b"\r\n"
    reply = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 10_000
    with dribbling_server(reply, every=0.001, piece=1030) as port:
        transport = WebhookTransport(
            URL=f"http://127.0.0.1:{port}/in", MAX_RESPONSE_BYTES=4096, TIMEOUT=5
        )
        started = time.monotonic()
        with pytest.raises(DeliveryError, match="HTTP 503") as failure:
            transport.send(message())
        transport.close()
    assert time.monotonic() - started < 2.5  # stopped at the cap, not at the deadline
    assert len(str(failure.value)) < 700


def test_endless_response_headers_fail_the_attempt(loopback):
    reply = b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 400_000
    with dribbling_server(reply, every=0.001, piece=16_384) as port:
        transport = WebhookTransport(URL=f"http://127.0.0.1:{port}/in", TIMEOUT=5)
        started = time.monotonic()
        with pytest.raises(DeliveryError, match="RemoteProtocolError") as failure:
            transport.send(message())
        transport.close()
    assert not isinstance(failure.value, PermanentDeliveryError)
    assert time.monotonic() - started < 2.5


# -- what a failure tells (last_error is read by every tenant's REST users) -----------------
@pytest.mark.django_db(transaction=True)
def test_an_error_names_the_origin_never_the_path_or_query(settings, sink):
    url = sink + "/gone/T0K3N-PATH?token=s3cret"
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": url}}}
    (message_id,) = make_messages(1)
    Relay(instance_id="r1").run_until_idle()
    error = OutboxMessage.objects.get(id=message_id).last_error
    assert "HTTP 404 from http://127.0.0.1:" in error
    assert "T0K3N" not in error and "s3cret" not in error


def test_credentials_in_the_url_are_a_configuration_error():
    config = {"*": {"BACKEND": "webhook", "OPTIONS": {"URL": "https://u:p@hooks.example/in"}}}
    assert any("may not carry credentials" in p for p in config_problems(config))
