"""run_scheduler and run_relay started while the database is away wait for it (one line per
reason naming every host, /readyz 503 without them, /livez 200), say which host they
reached, and say so again when it goes away and comes back. The database is reached through
a TCP proxy on a localhost port that the test opens and closes."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest
from django.db import connection
from psycopg.conninfo import conninfo_to_dict

from tests.brokers import free_port
from tests.helpers import wait_for
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


def server_address() -> str | tuple[str, int]:
    """Where the test database's server listens (a Unix socket, or host and port)."""
    info = conninfo_to_dict(os.environ["DATABASE_URL"])
    host, port = str(info.get("host") or "127.0.0.1"), str(info.get("port") or "5432")
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, int(port))


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_commands_wait_for_the_database_and_follow_it_away_and_back(cluster):
    proxy = TcpProxy(server_address())  # not listening yet
    dead = free_port()
    user = connection.settings_dict["USER"] or "postgres"
    url = (
        f"postgresql://{user}@127.0.0.1:{dead},127.0.0.1:{proxy.port}/"
        f"{connection.settings_dict['NAME']}?target_session_attrs=read-write"
    )
    health = free_port()
    scheduler = cluster.start("waiter", f"--health-port={health}", env={"DATABASE_URL": url})
    relay = cluster.start("relay", command="run_relay", env={"DATABASE_URL": url})
    both = f"127.0.0.1:{dead}: Connection refused; 127.0.0.1:{proxy.port}: Connection refused"
    for instance in (scheduler, relay):
        wait_for(lambda i=instance: "database unavailable" in i.log(), timeout=30, what="a wait")
        assert f"database unavailable: {both}; retrying in" in instance.log()
    status, body = wait_for(lambda: probe(health, "/readyz"), timeout=10, what="/readyz")
    # The hosts and their errors are in the log (above), not on the unauthenticated port.
    assert (status, body.strip()) == (503, "scheduler: not ready: not connected to the database")
    assert probe(health, "/livez")[0] == 200
    try:
        proxy.start()
        reached = f"connected to 127.0.0.1:{proxy.port}"
        for instance in (scheduler, relay):
            wait_for(lambda i=instance: reached in i.log(), timeout=15, what="the database")
            assert "database reached after" in instance.log()
        wait_for(lambda: probe(health, "/readyz")[0] == 200, timeout=15, what="ready")
        # The server goes away under them, and comes back.
        proxy.stop()
        gone = f"database unavailable (was on 127.0.0.1:{proxy.port}): "
        for instance in (scheduler, relay):
            wait_for(lambda i=instance: gone in i.log(), timeout=15, what="the loss noticed")
        proxy.start()
        for instance in (scheduler, relay):
            wait_for(
                lambda i=instance: "database is back after" in i.log(), timeout=15, what="back"
            )
            assert f"{reached}\n" in instance.log().split("database is back after")[1]
        wait_for(lambda: probe(health, "/readyz")[0] == 200, timeout=15, what="ready again")
        for instance in (scheduler, relay):
            assert instance.stop() == 0, cluster.logs()
    finally:
        proxy.stop()
    assert "Traceback" not in cluster.logs(), cluster.logs()
