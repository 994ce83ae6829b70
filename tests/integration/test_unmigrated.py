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
from tests.integration.stopping import exit_code, finished, kill_running, terminate
from tests.integration.test_database_wait import probe

pytestmark = pytest.mark.integration

SAID = "django-dsched's tables are not in the database 'default' (no schedule_t"


def start(*args: str, url: str) -> subprocess.Popen[str]:
    """``manage.py`` (``python -m django``) with ``args`` on the database at ``url``, started."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": url,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def manage(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return finished(start(*args, url=url), 300)


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
    # The one-off commands meet the same empty database, each started beside the others
    # (a Python start is most of their time); migrate runs once all of them have seen it.
    one_offs = [
        start("dsched", "list", url=empty_database),
        start("run_scheduler", "--once", url=empty_database),
        start("run_relay", "--once", url=empty_database),
    ]
    try:
        for instance in (scheduler, relay):
            wait_for(lambda i=instance: SAID in i.log(), timeout=60, what="the reason")
            assert f"not ready: {SAID}" in instance.log()
            assert "run manage.py migrate; retrying in" in instance.log()
        status, body = probe(health, "/readyz")
        assert status == 503 and body.startswith(f"scheduler: not ready: {SAID}"), body
        listed, *onces = (finished(process, 300) for process in one_offs)
    finally:
        kill_running(*one_offs)

    assert listed.returncode == 1
    assert "CommandError: django-dsched's tables are not in the database 'default'" in (
        listed.stderr
    ), listed.stderr
    assert "run manage.py migrate" in listed.stderr
    assert "Traceback" not in listed.stderr, listed.stderr

    for once in onces:
        assert once.returncode == 1, once.stdout + once.stderr
        assert f"CommandError: {SAID}" in once.stderr, once.stderr
        assert "Traceback" not in once.stderr, once.stderr

    migrated = manage("migrate", "-v", "0", url=empty_database)
    assert migrated.returncode == 0, migrated.stderr
    wait_for(lambda: "became leader" in scheduler.log(), timeout=30, what="leadership")
    wait_for(lambda: "the tables are there after" in scheduler.log(), timeout=15, what="said")
    wait_for(lambda: probe(health, "/readyz")[0] == 200, timeout=15, what="ready")
    # Both told to stop at once: each stops gracefully (exit 0) on its own.
    terminate(scheduler, relay)
    for instance in (scheduler, relay):
        assert exit_code(instance) == 0, cluster.logs()
    assert "Traceback" not in cluster.logs(), cluster.logs()
