"""An embedded PostgreSQL server for the demo and the tests, when DATABASE_URL is unset.

It uses the PostgreSQL build bundled in the ``pgserver`` wheel, keeps its data in
``.dsched-data/<name>`` at the top of the checkout (git-ignored) and listens on a Unix
socket only. Every process of the demo calls :func:`database_url` and gets the same server.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

DATA_ROOT = Path(
    os.environ.get("DSCHED_DATA_DIR", Path(__file__).resolve().parent.parent / ".dsched-data")
)


# Settings applied once to a data directory (then the server restarts), as on the machine
# the peers' figures in BENCH_PEERS were measured on: initdb's defaults (128 MB of shared
# buffers, a checkpoint every 1 GB of WAL) are too small for million-row benchmarks.
TUNING = {
    "shared_buffers": "1GB",
    "max_connections": "200",
    "work_mem": "16MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
}
# The test suite's server (tests/settings.py) runs without fsync, as tests/patroni.py's
# nodes do: a test kills processes, never the machine, so what was written survives in the
# page cache; fsync would only make every commit, TRUNCATE and checkpoint (each DROP
# DATABASE's: the test database's, at the end of a run) wait on the shared disk.
TUNING_OF = {"pg-test": {**TUNING, "fsync": "off"}}


def _server(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(DATA_ROOT / name, cleanup_mode=None)
    marker = Path(server.pgdata) / "dsched-tuned"
    tuning = TUNING_OF.get(name, TUNING)
    wanted = "".join(f"{k} = {v}\n" for k, v in tuning.items())
    if not marker.exists() or marker.read_text() != wanted:
        from pgserver._commands import pg_ctl

        for setting, value in tuning.items():
            server.psql(f"ALTER SYSTEM SET {setting} = '{value}';")
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)
        marker.write_text(wanted)
    return server


def database_url(name: str = "pg", database: str = "dsched") -> str:
    """Start (or reuse) the embedded server and return a URL for ``database`` on it."""
    server = _server(name)
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{database}';")
    if "(1 row)" not in exists:
        server.psql(f'CREATE DATABASE "{database}";')
    return server.get_uri(database)


def stop(name: str = "pg") -> None:
    """Stop the embedded server if it runs (a fast shutdown: sessions are ended)."""
    path = DATA_ROOT / name
    if not (path / "postmaster.pid").exists():
        return
    server = _server(name)
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
