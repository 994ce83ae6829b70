"""Benchmark of creates from many processes at once, beside a hand-written ceiling.

    .venv/bin/python bench/concurrent_create_bench.py --procs 8 --count 400 --runs 5
    .venv/bin/python bench/concurrent_create_bench.py --peer-python /tmp/peer-venv/bin/python

Each round runs, in this order (the order rotates from round to round):

- ``ceiling``: a one-row ``INSERT`` into a one-column table per call, autocommit, through
  psycopg alone: the rate at which this server commits (each commit waits for its WAL
  flush; concurrent commits share flushes).
- ``orm``: ``Model.objects.create()`` of a row of the same one-column table through Django's
  ORM, autocommit: the least any Django create costs, the ORM's own Python included (on a
  machine whose cores the clients share with the server, that Python is part of the bound).
- ``dsched``: ``api.create_once(delay=1 h)`` per call, autocommit (as a web request
  scheduling a reminder does).
- ``django-q2`` (with ``--peer-python``, a Python with ``django-q2`` installed):
  ``Schedule.objects.create(schedule_type=ONCE, next_run=now + 1 h)`` per call, autocommit,
  on its own tables in the same database.

each from 1 process and from ``--procs`` processes. The processes start together (they wait
for a common start time) and each makes ``--count`` calls; the rate is all calls over the
time from the first start to the last finish. Prints medians per measure and the ratios
dsched / ceiling, dsched / orm and dsched(N) / dsched(1).

Runs against the ``dsched_create_bench`` database (``$BENCH_DATABASE`` if set), on the
embedded PostgreSQL unless DATABASE_URL is set (``DSCHED_BENCH_SERVER=stock``: a stock one,
bench/stock_server.py). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
DATABASE = os.environ.get("BENCH_DATABASE", "dsched_create_bench")

PEER_SETTINGS = """
import os
SECRET_KEY = "bench"
INSTALLED_APPS = ["django.contrib.contenttypes", "django_q"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": os.environ["PEER_DB"],
    "USER": os.environ.get("PEER_USER") or None,
    "HOST": os.environ.get("PEER_HOST") or None,
    "PORT": os.environ.get("PEER_PORT") or None,
}}
USE_TZ = True
Q_CLUSTER = {"name": "bench", "orm": "default", "timeout": 60, "retry": 120}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
"""


def wait_until(start_at: float) -> None:
    while (left := start_at - time.time()) > 0:
        time.sleep(min(left, 0.01))


def child(kind: str, count: int, start_at: float, tag: str) -> None:
    """In a child process: make ``count`` calls of ``kind`` from ``start_at``; print the
    start and end times (wall clock, shared by the processes) as JSON."""
    if kind == "ceiling":
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            conn.execute("SELECT 1")
            wait_until(start_at)
            started = time.time()
            for _ in range(count):
                conn.execute("INSERT INTO bench_ceiling_t (id) VALUES (DEFAULT)")
            ended = time.time()
    elif kind == "orm":
        sys.path.insert(0, str(HERE.parent))
        os.environ["DEBUG"] = "False"
        from setup_django import configure

        configure(DATABASE)
        from django.db import connection, models

        class CeilingRow(models.Model):
            id = models.BigAutoField(primary_key=True)

            class Meta:
                app_label = "dsched"
                managed = False
                db_table = "bench_ceiling_t"

            def __str__(self) -> str:
                return str(self.id)

        connection.ensure_connection()
        wait_until(start_at)
        started = time.time()
        for _ in range(count):
            CeilingRow.objects.create()
        ended = time.time()
    elif kind == "dsched":
        sys.path.insert(0, str(HERE.parent))
        os.environ["DEBUG"] = "False"
        from setup_django import configure

        configure(DATABASE)
        from datetime import timedelta

        from django.db import connection

        from django_dsched import api

        connection.ensure_connection()
        wait_until(start_at)
        started = time.time()
        for i in range(count):
            api.create_once(
                f"{tag}-{i}",
                delay=timedelta(hours=1),
                topic="mail",
                event_type="reminder.send",
                data={"user": i},
            )
        ended = time.time()
    else:  # django-q2, in its own interpreter
        import django
        from django.db import connection

        django.setup()
        from datetime import timedelta

        from django.utils import timezone
        from django_q.models import Schedule

        connection.ensure_connection()
        wait_until(start_at)
        started = time.time()
        for i in range(count):
            Schedule.objects.create(
                name=f"{tag}-{i}",
                func="math.copysign",
                kwargs={"user": i},
                schedule_type=Schedule.ONCE,
                next_run=timezone.now() + timedelta(hours=1),
            )
        ended = time.time()
    print(json.dumps([started, ended]), flush=True)


def peer_environment(url: str) -> dict[str, str]:
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = parse_qs(parts.query)
    settings_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "dsched-peer-settings"
    settings_dir.mkdir(exist_ok=True)
    (settings_dir / "peer_settings.py").write_text(PEER_SETTINGS)
    return {
        **os.environ,
        "PYTHONPATH": str(settings_dir),
        "DJANGO_SETTINGS_MODULE": "peer_settings",
        "PEER_DB": DATABASE,
        "PEER_USER": parts.username or "",
        "PEER_HOST": parts.hostname or query.get("host", [""])[0],
        "PEER_PORT": str(parts.port or query.get("port", [""])[0]),
    }


def run_round(kind: str, procs: int, count: int, peer: str | None, url: str, tag: str) -> float:
    python = peer if kind == "django-q2" else sys.executable
    env = peer_environment(url) if kind == "django-q2" else {**os.environ, "DATABASE_URL": url}
    start_at = time.time() + 1.5 + 0.2 * procs  # time for every process to set up
    children = [
        subprocess.Popen(
            [python, str(HERE), "child", kind, str(count), repr(start_at), f"{tag}-{p}"],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for p in range(procs)
    ]
    spans = []
    for process in children:
        out, _ = process.communicate()
        if process.returncode:
            raise SystemExit(f"{kind} child failed ({process.returncode})")
        spans.append(json.loads(out.strip().splitlines()[-1]))
    first = min(span[0] for span in spans)
    last = max(span[1] for span in spans)
    return procs * count / (last - first)


def prepare(url: str, peer: str | None) -> None:
    sys.path.insert(0, str(HERE.parent))
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_ceiling_t (id bigserial PRIMARY KEY)")
    if peer:
        subprocess.run(
            [peer, "-m", "django", "migrate", "-v", "0"], env=peer_environment(url), check=True
        )


def reset(peer: str | None) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE schedule_t, event_store_t, outbox_message_t, bench_ceiling_t")
        if peer:
            cursor.execute("TRUNCATE django_q_schedule")
        cursor.execute("CHECKPOINT")


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--count", type=int, default=400, help="calls per process")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--peer-python", help="a Python with django-q2 installed")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    os.environ["DEBUG"] = "False"
    from setup_django import configure

    url = configure(DATABASE)
    peer = args.peer_python
    prepare(url, peer)
    kinds = ["ceiling", "orm", "dsched"] + (["django-q2"] if peer else [])
    rates: dict[tuple[str, int], list[float]] = {}
    for run in range(args.runs):
        order = kinds[run % len(kinds) :] + kinds[: run % len(kinds)]
        for procs in (1, args.procs):
            for kind in order:
                reset(peer)
                rate = run_round(kind, procs, args.count, peer, url, f"r{run}")
                rates.setdefault((kind, procs), []).append(rate)
                print(f"run {run}: {kind} x{procs}: {rate:,.0f}/s", flush=True)
    median = {key: statistics.median(values) for key, values in rates.items()}
    print()
    for (kind, procs), value in median.items():
        runs = ", ".join(f"{v:,.0f}" for v in rates[(kind, procs)])
        print(f"{kind} x{procs}: median {value:,.0f}/s  (runs: {runs})")
    for procs in (1, args.procs):
        print(
            f"dsched / ceiling, {procs} process(es): "
            f"{median[('dsched', procs)] / median[('ceiling', procs)]:.2f}; "
            f"orm / ceiling {median[('orm', procs)] / median[('ceiling', procs)]:.2f}; "
            f"dsched / orm {median[('dsched', procs)] / median[('orm', procs)]:.2f}"
        )
        if peer:
            print(
                f"dsched / django-q2, {procs} process(es): "
                f"{median[('dsched', procs)] / median[('django-q2', procs)]:.2f}"
            )
    for kind in kinds:
        print(
            f"{kind} x{args.procs} / {kind} x1: "
            f"{median[(kind, args.procs)] / median[(kind, 1)]:.2f}"
        )


if __name__ == "__main__":
    main()
