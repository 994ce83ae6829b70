"""A real PgBouncer in transaction mode in front of the test database.

The fixture starts Debian's ``pgbouncer`` on a free localhost port, pointed at the server of
``DATABASE_URL`` (the embedded server's Unix socket, or a host and port), with
``pool_mode = transaction`` and a small pool, so clients share backends as they do in
production. PgBouncer refuses to run as root: as root it runs as the owner of the server's
socket directory (or ``nobody``). When the binary is missing the tests skip loudly, except
under CI=true, where they fail (scripts/test.sh installs the package).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from tests.brokers import free_port, port_open, require, stop
from tests.helpers import backend_gone, wait_for

# Backends per (database, user): fewer than the clients the tests start, so they share.
POOL_SIZE = 3


@dataclass
class PgBouncer:
    port: int
    user: str
    workdir: Path

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str, **options: Any) -> psycopg.Connection:
        """A client of the pool (no prepared statements, as Django's default)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            dbname=database,
            user=self.user,
            prepare_threshold=None,
            **options,
        )

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command on PgBouncer's admin console (simple query protocol only)."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            dbname="pgbouncer",
            user=self.user,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
            row_factory=dict_row,
        ) as console:
            cursor = console.execute(command)
            return cursor.fetchall() if cursor.description else []

    def server_pids(self) -> set[int]:
        """The backends PgBouncer holds open now."""
        return {int(row["remote_pid"]) for row in self.admin("SHOW SERVERS")}

    def log(self) -> str:
        return (self.workdir / "pgbouncer.log").read_text()

    def run_clients(self, database: str, script: str, tags: list[str], settings: str) -> None:
        """Run ``script`` (Python, its tag as argv[1]) in one process per tag at once, each a
        Django client of the pool with the settings module ``settings``; each must exit 0."""
        root = Path(__file__).resolve().parent.parent
        env = {
            **os.environ,
            "DATABASE_URL": self.url(database),
            "DJANGO_SETTINGS_MODULE": settings,
            "PYTHONPATH": str(root),
        }
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", script, tag],
                cwd=root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for tag in tags
        ]
        for process in processes:
            output, _ = process.communicate(timeout=300)
            assert process.returncode == 0, output


def _run_as(server_host: str) -> str | None:
    """The user to run PgBouncer as (None: the current one)."""
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/"):
        owner = pwd.getpwuid(os.stat(server_host).st_uid).pw_name
        if owner != "root":
            return owner  # it can reach the socket
    return "nobody"


def _config(workdir: Path, port: int, server: dict[str, str], user: str) -> str:
    target = " ".join(
        f"{key}={server[key]}" for key in ("host", "port", "user", "password") if server.get(key)
    )
    return f"""\
[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir}/userlist.txt
admin_users = {user}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 200
logfile = {workdir}/pgbouncer.log
pidfile =
"""


@pytest.fixture(scope="module")
def pgbouncer(django_db_setup: None, django_db_blocker: Any) -> Iterator[PgBouncer]:
    binary = require(shutil.which("pgbouncer") or "/usr/sbin/pgbouncer", "pgbouncer")
    server = conninfo_to_dict(os.environ["DATABASE_URL"])
    server.setdefault("port", "5432")
    user = str(server.get("user") or pwd.getpwuid(os.geteuid()).pw_name)
    run_as = _run_as(str(server.get("host", "/tmp")))
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="dsched-pgbouncer-"))
    (workdir / "userlist.txt").write_text(f'"{user}" ""\n')
    (workdir / "pgbouncer.ini").write_text(_config(workdir, port, server, user))
    command = [binary, str(workdir / "pgbouncer.ini")]
    if run_as:
        entry = pwd.getpwnam(run_as)
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        command[1:1] = ["-u", run_as]
    out = (workdir / "pgbouncer.out").open("w")
    process = subprocess.Popen(
        command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    bouncer = PgBouncer(port, user, workdir)
    try:
        wait_for(
            lambda: process.poll() is not None or port_open(port),
            timeout=20,
            what="pgbouncer to listen",
        )
        assert process.poll() is None, (workdir / "pgbouncer.out").read_text()
        yield bouncer
    finally:
        backends = bouncer.server_pids() if process.poll() is None else set()
        stop(process)
        out.close()
        # The test database is dropped at the end: wait for the pooled backends to exit.
        with django_db_blocker.unblock():
            wait_for(
                lambda: all(backend_gone(pid) for pid in backends),
                timeout=10,
                what="pgbouncer's backends to exit",
            )
        shutil.rmtree(workdir, ignore_errors=True)
