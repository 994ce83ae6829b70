"""A stock PostgreSQL for the benchmarks: Debian's PostgreSQL 15 with its default settings
except ``shared_buffers = 512MB`` and ``max_connections = 200`` (the server issue 29 was
measured on: ``max_wal_size`` 1 GB, ``checkpoint_timeout`` 5 min, ``work_mem`` 4 MB,
``synchronous_commit`` on).

Chosen by ``DSCHED_BENCH_SERVER=stock`` (``bench/setup_django.configure``); the default,
``tuned``, is the embedded server of ``example_project/embedded_db.py``. The cluster lives in
``.dsched-data/stock-pg15`` (``DSCHED_DATA_DIR``), listens on a Unix socket only, and is
started on first use and left running (``python bench/stock_server.py stop`` stops it). As
root it runs as the ``postgres`` user (PostgreSQL refuses root).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(os.environ.get("DSCHED_STOCK_PG_BIN", "/usr/lib/postgresql/15/bin"))
ROOT = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("DSCHED_DATA_DIR", ROOT / ".dsched-data"))
NAME = "stock-pg15"
# What differs from initdb's defaults (Debian's postgresql.conf changes nothing else that
# matters here: its other lines are logging, paths, locale and SSL).
SETTINGS = {"shared_buffers": "512MB", "max_connections": "200"}


def _user() -> pwd.struct_passwd | None:
    return pwd.getpwnam("postgres") if os.geteuid() == 0 else None


def _run(args: list[str], user: pwd.struct_passwd | None) -> None:
    subprocess.run(
        args,
        check=True,
        stdout=subprocess.DEVNULL,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )


def _psql(socket_dir: Path, statement: str, user: pwd.struct_passwd | None) -> str:
    out = subprocess.run(
        [str(BIN / "psql"), "-h", str(socket_dir), "-d", "postgres", "-Atc", statement],
        check=True,
        capture_output=True,
        text=True,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PGUSER": "postgres"},
    )
    return out.stdout.strip()


def _running(data: Path, user: pwd.struct_passwd | None) -> bool:
    status = subprocess.run(
        [str(BIN / "pg_ctl"), "-D", str(data), "status"],
        stdout=subprocess.DEVNULL,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    return status.returncode == 0


def database_url(database: str) -> str:
    """Start (or reuse) the stock server; return a URL for ``database`` on it."""
    user = _user()
    data = DATA_ROOT / NAME / "data"
    sockets = DATA_ROOT / NAME / "run"
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        sockets.mkdir(parents=True, exist_ok=True)
        if user:
            for path in (DATA_ROOT / NAME, data, sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        initdb = [str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8"]
        _run([*initdb, "--locale", "C.UTF-8", "-A", "trust"], user)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("\n# bench/stock_server.py: Debian defaults, and\n")
            conf.writelines(f"{k} = '{v}'\n" for k, v in SETTINGS.items())
            conf.write(f"listen_addresses = ''\nunix_socket_directories = '{sockets}'\n")
    if not _running(data, user):  # pg_ctl status: a stale postmaster.pid whose process is gone
        log = DATA_ROOT / NAME / "server.log"
        _run([str(BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "start"], user)
    deadline = time.monotonic() + 30
    while True:
        try:
            exists = _psql(sockets, f"SELECT 1 FROM pg_database WHERE datname = '{database}'", user)
            break
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    if exists != "1":
        _psql(sockets, f'CREATE DATABASE "{database}"', user)
    return f"postgresql://postgres@/{database}?host={sockets}"


def stop() -> None:
    data = DATA_ROOT / NAME / "data"
    if _running(data, _user()):
        _run([str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], _user())


if __name__ == "__main__":
    if sys.argv[1:] == ["stop"]:
        stop()
    else:
        print(database_url(sys.argv[1] if len(sys.argv) > 1 else "postgres"))
