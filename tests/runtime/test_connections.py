"""The libpq options the commands add, and one-line descriptions of failed connections."""

from __future__ import annotations

import socket
import time

import psycopg
import pytest
from django.db import connections

from django_dsched.runtime.connections import (
    apply_connection_options,
    connection_options,
    describe_failure,
)
from tests.brokers import free_port


def failure(conninfo: str) -> psycopg.OperationalError:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(conninfo)
    return caught.value


def test_a_failed_multi_host_connection_names_every_host_with_its_reason():
    first, second = free_port(), free_port()
    exc = failure(f"host=127.0.0.1,127.0.0.1 port={first},{second} connect_timeout=2")
    assert describe_failure(exc) == (
        f"127.0.0.1:{first}: Connection refused; 127.0.0.1:{second}: Connection refused"
    )


def test_a_failed_single_host_connection_is_its_first_line():
    port = free_port()
    assert describe_failure(failure(f"host=127.0.0.1 port={port}")) == (
        f'connection to server at "127.0.0.1", port {port} failed: Connection refused'
    )


def test_connect_timeout_bounds_a_host_that_never_answers():
    """A host that accepts the connection and says nothing (as a hung server or a lost
    route does) costs connect_timeout, then the next host is tried (psycopg's own default
    is 130 s per host)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        other = free_port()
        started = time.monotonic()
        exc = failure(f"host=127.0.0.1,127.0.0.1 port={port},{other} connect_timeout=2")
        elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 5, elapsed
    assert describe_failure(exc) == (
        f"127.0.0.1:{port}: connection timeout expired; 127.0.0.1:{other}: Connection refused"
    )


@pytest.fixture
def entry_options(monkeypatch):
    """The default entry's OPTIONS, put back after the test."""
    settings_dict = connections["default"].settings_dict
    options = {"connect_timeout": 30, "sslmode": "prefer"}
    monkeypatch.setitem(settings_dict, "OPTIONS", options)
    return options


def test_the_options_go_beneath_what_the_entry_sets(entry_options):
    applied = apply_connection_options("default")
    assert entry_options == {
        "connect_timeout": 30,  # the entry's own
        "sslmode": "prefer",
        "keepalives": 1,
        "keepalives_idle": 4,
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": 7000,
    }
    assert applied == {k: v for k, v in entry_options.items() if k != "sslmode"}


def test_an_option_set_to_none_is_dropped(entry_options, settings):
    settings.DSCHED_CONNECTION_OPTIONS = {"connect_timeout": 3, "tcp_user_timeout": None}
    assert connection_options() == {"connect_timeout": 3}
    apply_connection_options("default")
    assert entry_options == {"connect_timeout": 30, "sslmode": "prefer"}
