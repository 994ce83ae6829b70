"""A PostgreSQL 15 server with stock settings, for measuring what most users run.

    eval "$(python bench/stock_server.py start)"    # exports DATABASE_URL
    .venv/bin/python bench/fire_bench.py burst       # any benchmark honours DATABASE_URL
    python bench/stock_server.py stop

The server is Debian's PostgreSQL 15 (``postgresql-15``) on a fresh ``initdb`` cluster with
every setting at its default except ``shared_buffers = 512MB`` and ``max_connections = 200``
(so ``max_wal_size`` 1 GB, ``checkpoint_timeout`` 5 min, ``synchronous_commit`` on,
``wal_compression`` off), as a team that installed the package and raised the buffers would
run it. The embedded server of the tests and of the other benchmarks is tuned instead
(``example_project/embedded_db.py``: 1 GB of buffers, no checkpoint within a run).

It keeps its data in ``.dsched-data/stock`` (or ``$DSCHED_DATA_DIR/stock``), listens on a
Unix socket there and on no TCP port, and runs as the ``postgres`` user when started by
root (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import sys
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
ROOT = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("DSCHED_DATA_DIR", ROOT / ".dsched-data")) / "stock"
PORT = 5499  # only names the socket file: no TCP listener
STOCK = {"shared_buffers": "512MB", "max_connections": "200"}


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _owner_ready() -> None:
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(DATA_ROOT, user.pw_uid, user.pw_gid)


def url(database: str = "postgres") -> str:
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    return f"postgresql://{user}@/{database}?host={DATA_ROOT}&port={PORT}"


def start() -> str:
    if not (BIN / "postgres").exists():
        sys.exit("PostgreSQL 15 is not installed: apt-get install postgresql-15")
    data = DATA_ROOT / "data"
    _owner_ready()
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            _as_postgres([str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if not (data / "postmaster.pid").exists():
        options = " ".join(f"-c {name}={value}" for name, value in STOCK.items())
        options += f" -c listen_addresses='' -c unix_socket_directories='{DATA_ROOT}'"
        options += f" -p {PORT}"
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(DATA_ROOT / "server.log"),
                    "-w",
                    "-o",
                    options,
                    "start",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return url()


def stop() -> None:
    data = DATA_ROOT / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_postgres([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop"]),
            check=True,
            stdout=subprocess.DEVNULL,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "url"])
    args = parser.parse_args()
    if args.action == "start":
        print(f"export DATABASE_URL='{start()}'")
    elif args.action == "stop":
        stop()
    else:
        print(url())


if __name__ == "__main__":
    main()
