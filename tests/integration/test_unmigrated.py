"""run_scheduler and run_relay started on a database that ``migrate`` has not reached yet
say so in one line (no traceback, ``/readyz`` 503 with the reason), wait, and start once
the tables are there; ``dsched`` says the same as a command error."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from tests.brokers import free_port
from tests.helpers import sql, wait_for
from tests.integration.conftest import ROOT, database_url
from tests.integration.test_database_wait import probe

pytestmark = pytest.mark.integration

SAID = "django-dsched's tables are not in the database 'default' (no schedule_t"


def manage(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": url,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def empty_database():
    """A database on the test server with nothing in it; its URL. Dropped after the test."""
    name = f"dsched_unmigrated_{uuid.uuid4().hex[:8]}"
    sql(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(database_url())._replace(path="/" + name))
    finally:
        connection.close()
        sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_commands_wait_for_migrate_and_say_so(cluster, empty_database):
    health = free_port()
    env = {"DATABASE_URL": empty_database}
    scheduler = cluster.start("early", f"--health-port={health}", env=env)
    relay = cluster.start("relay", command="run_relay", env=env)
    for instance in (scheduler, relay):
        wait_for(lambda i=instance: SAID in i.log(), timeout=30, what="the reason")
        assert f"not ready: {SAID}" in instance.log()
        assert "run manage.py migrate; retrying in" in instance.log()
    status, body = probe(health, "/readyz")
    assert status == 503 and body.startswith(f"scheduler: not ready: {SAID}"), body

    listed = manage("dsched", "list", url=empty_database)
    assert listed.returncode == 1
    assert "CommandError: django-dsched's tables are not in the database 'default'" in (
        listed.stderr
    ), listed.stderr
    assert "run manage.py migrate" in listed.stderr
    assert "Traceback" not in listed.stderr, listed.stderr

    for command in ("run_scheduler", "run_relay"):
        once = manage(command, "--once", url=empty_database)
        assert once.returncode == 1, once.stdout + once.stderr
        assert f"CommandError: {SAID}" in once.stderr, once.stderr
        assert "Traceback" not in once.stderr, once.stderr

    migrated = manage("migrate", "-v", "0", url=empty_database)
    assert migrated.returncode == 0, migrated.stderr
    wait_for(lambda: "became leader" in scheduler.log(), timeout=30, what="leadership")
    wait_for(lambda: "the tables are there after" in scheduler.log(), timeout=15, what="said")
    wait_for(lambda: probe(health, "/readyz")[0] == 200, timeout=15, what="ready")
    for instance in (scheduler, relay):
        assert instance.stop() == 0, cluster.logs()
    assert "Traceback" not in cluster.logs(), cluster.logs()
