"""The webhook's keep-alive connections (outbox/transports/webhook_connections.py): reused
between sends, one per send under way, never reused once cut short or closed by the server,
and a send looks at one idle connection, not at all of them."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler

import pytest

from django_dsched.exceptions import DeliveryError
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.webhook import WebhookTransport
from django_dsched.outbox.transports.webhook_network import DeadlineStream
from tests.helpers import wait_for
from tests.webhook_servers import serve_sink


class KeepAlive(BaseHTTPRequestHandler):
    """An HTTP/1.1 endpoint keeping connections alive; records each request's client port."""

    protocol_version = "HTTP/1.1"
    ports: list[int] = []
    ended: list[int] = []  # client ports whose connection the server saw end

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        KeepAlive.ports.append(self.client_address[1])
        if self.path == "/big":  # more than the transport reads
            body = b"x" * 256 * 1024
            self.send_response(500)
        else:
            body = b""
            self.send_response(204 if self.path != "/close" else 200)
        if self.path == "/close":
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass
        if self.path == "/hang-up":  # closes after answering, without saying so
            self.close_connection = True

    def handle(self):
        try:
            super().handle()
        except OSError:  # the client closed a connection it left unread: a reset
            pass

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        KeepAlive.ended.append(self.client_address[1])


@pytest.fixture
def endpoint(settings) -> Iterator[str]:
    settings.DSCHED_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DSCHED_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    KeepAlive.ports, KeepAlive.ended = [], []
    with serve_sink(KeepAlive) as url:
        yield url


def message() -> Message:
    id_ = uuid.uuid4()
    return Message(id_, "reports", "report.build", {"id": str(id_), "type": "report.build"}, 1)


def transport(url: str, path: str = "/ok", **options) -> WebhookTransport:
    return WebhookTransport(URL=url + path, TIMEOUT=5, **options)


def test_sends_one_after_another_reuse_one_connection(endpoint):
    hook = transport(endpoint)
    for _ in range(5):
        hook.send(message())
    hook.close()
    assert len(KeepAlive.ports) == 5
    assert len(set(KeepAlive.ports)) == 1


def test_sends_at_once_each_have_a_connection_and_keep_them(endpoint):
    hook = transport(endpoint)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: hook.send(message()), range(4)))
    opened = set(KeepAlive.ports)
    assert 1 <= len(opened) <= 4
    for _ in range(4):
        hook.send(message())
    assert set(KeepAlive.ports) == opened  # no new connection: the idle ones were reused
    hook.close()
    wait_for(lambda: set(KeepAlive.ended) == opened, timeout=5)  # close() closed them all


def test_a_connection_the_server_closes_is_not_reused(endpoint):
    hook = transport(endpoint, "/close")
    hook.send(message())
    hook.send(message())
    assert len(set(KeepAlive.ports)) == 2
    hook.close()


def test_a_connection_the_server_hung_up_on_while_idle_is_dropped(endpoint):
    hook = transport(endpoint, "/hang-up")
    hook.send(message())
    wait_for(lambda: KeepAlive.ended == KeepAlive.ports, timeout=5)
    hook.send(message())  # not on the dead connection: delivered on a new one
    assert len(set(KeepAlive.ports)) == 2
    hook.close()


def test_a_reply_read_only_in_part_leaves_its_connection_closed(endpoint):
    hook = transport(endpoint, "/big", MAX_RESPONSE_BYTES=1024)
    for _ in range(2):
        with pytest.raises(DeliveryError, match="HTTP 500"):
            hook.send(message())
    assert len(set(KeepAlive.ports)) == 2  # the rest of the body was never read: not reused
    hook.close()


def test_a_send_looks_at_one_idle_connection_not_at_every_one(endpoint, monkeypatch):
    """With many connections idle, a send checks only the one it takes (httpcore's pool
    polled every idle socket at each request and each response: the relay's CPU per
    message grew with its sends at once)."""
    hook = transport(endpoint)
    barrier = threading.Barrier(16)

    def send_together(_):
        barrier.wait(5)
        hook.send(message())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(send_together, range(16)))
    assert len(set(KeepAlive.ports)) >= 8  # many connections idle now
    polls = []
    real = DeadlineStream.get_extra_info

    def counted(self, info):
        if info == "is_readable":
            polls.append(self)
        return real(self, info)

    monkeypatch.setattr(DeadlineStream, "get_extra_info", counted)
    hook.send(message())
    assert len(polls) <= 1
    hook.close()
