"""Shared by the benchmarks: point Django at a benchmark database and set it up.

``configure("dsched_bench")`` uses that database on the embedded PostgreSQL, or on the
server of ``DATABASE_URL`` when it is set, or, with ``DSCHED_BENCH_SERVER=stock``, on a stock
PostgreSQL 15 (``bench/stock_server.py``), with the example project's settings.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def _create_missing(url: str, database: str) -> None:
    """Create ``database`` on the server of ``url`` unless it exists."""
    import psycopg

    server = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')


def configure(database: str) -> str:
    """Set up Django on ``database``; return its URL (for subprocesses)."""
    sys.path.insert(0, str(ROOT))
    url = os.environ.get("DATABASE_URL")
    if url:
        url = urlunsplit(urlsplit(url)._replace(path=f"/{database}"))
        _create_missing(url, database)
    elif os.environ.get("DSCHED_BENCH_SERVER", "tuned") == "stock":
        from stock_server import database_url as stock_url

        url = stock_url(database)
    else:
        from example_project.embedded_db import database_url

        url = database_url(database=database)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.db.models.signals import post_migrate

    post_migrate.connect(require_current_schema, dispatch_uid="bench-current-schema")
    return url


def require_current_schema(sender: Any, using: str = "default", **_: Any) -> None:
    """After a benchmark's ``migrate``: stop unless every index of its database is valid and
    every SQL function the initial migration makes has the body this checkout makes it with.

    A partitioned index left invalid (an experiment that dropped a partition's index and did
    not build it again) is missing on its partitions, and every figure taken on them would be
    flattered by the index writes it spares; a function made by an older checkout (the
    initial migration is edited in place until a release) would measure the old code. Drop
    the database to have it made again."""
    from django.db import connections

    from django_dsched.models import outbox, overlap

    if sender.name != "django_dsched":
        return
    connection = connections[using]
    made = re.findall(
        r"CREATE FUNCTION (\w+)\(.*?\$\$(.*?)\$\$",
        overlap.PROBES + outbox.PENDING_IDS_FUNCTION,
        re.S,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid ORDER BY 1"
        )
        stale = [f"invalid index {name}" for (name,) in cursor.fetchall()]
        for name, body in made:
            cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [name])
            if [row[0] for row in cursor.fetchall()] != [body]:
                stale.append(f"function {name} not as this checkout makes it")
    if stale:
        raise SystemExit(
            f"{connection.settings_dict['NAME']}: {'; '.join(stale)}: drop that database and"
            " run again"
        )
