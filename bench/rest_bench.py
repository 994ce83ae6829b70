"""Benchmark of the REST bulk create against the Python bulk API, in the same run.

    .venv/bin/python bench/rest_bench.py                         # 10,000 items, 5 rounds
    .venv/bin/python bench/rest_bench.py bulk-create --count 10000 --runs 5
    .venv/bin/python bench/rest_bench.py bulk-cancel --count 10000 --runs 5
    .venv/bin/python bench/rest_bench.py rss --count 10000 [--pad 600]

``bulk-create``: each round creates ``--count`` one-shot reminders (a name, a time, a key,
a small ``data``) twice, on an emptied table each time: once by ``POST schedules/bulk/``
(one request, through Django's test client: the whole Django and REST framework stack,
middleware included, without a socket; the body is encoded beforehand, as a client
would), once by ``api.bulk_create`` of the same items as ``api.Once`` specs. Prints the
items/s of each (medians of ``--runs``) and their ratio (median of the per-round ratios).
``bulk-cancel``: the same for cancelling ``--count`` schedules by id, ``POST
schedules/bulk-cancel/`` against ``api.bulk_cancel`` (the schedules made afresh each time).
``rss``: a separate process makes one such request and prints the most memory Python had
allocated for it at once (``tracemalloc``: parsing, validating and answering the body)
and the process's peak RSS before and after.

Runs against a ``dsched_rest_bench`` database (on the embedded PostgreSQL unless
DATABASE_URL is set). Prints figures; asserts only that each call created every item.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"  # no query log: it would grow with every statement

from setup_django import ROOT, configure

URL = configure("dsched_rest_bench")

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

from django_dsched import api  # noqa: E402
from django_dsched.runtime.clock import database_now  # noqa: E402

PATH = "/api/dsched/schedules/bulk/"
CANCEL_PATH = "/api/dsched/schedules/bulk-cancel/"


def reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE schedule_t, event_store_t, outbox_message_t")


def items(count: int, at: datetime, pad: int = 0) -> list[dict[str, Any]]:
    """The REST items: what a service scheduling reminders would send (``pad``: that many
    more characters of data each)."""
    when = at.isoformat()
    extra = {"note": "x" * pad} if pad else {}
    return [
        {
            "kind": "ONCE",
            "name": f"reminder-{i}",
            "at": when,
            "topic": "mail",
            "event_type": "reminder.send",
            "key": f"order-{i}:reminder",
            "data": {"user": i, **extra},
        }
        for i in range(count)
    ]


def specs(count: int, at: datetime) -> list[Any]:
    """The same items for the Python API."""
    return [
        api.Once(
            at=at,
            name=f"reminder-{i}",
            topic="mail",
            event_type="reminder.send",
            key=f"order-{i}:reminder",
            data={"user": i},
        )
        for i in range(count)
    ]


def client() -> Client:
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "pw"
    )
    token, _ = Token.objects.get_or_create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}", "Host": "localhost"})


def post(http: Client, body: bytes, count: int) -> float:
    started = time.perf_counter()
    response = http.post(PATH, body, content_type="application/json")
    elapsed = time.perf_counter() - started
    assert response.status_code == 201, response.content[:500]
    assert json.loads(response.content)["created"] == count
    return elapsed


def python(count: int, at: datetime) -> float:
    made = specs(count, at)  # built before the clock starts, as the REST body is encoded
    started = time.perf_counter()
    created = api.bulk_create(made)
    elapsed = time.perf_counter() - started
    assert len(created) == count
    return elapsed


def report(label: str, rates: list[float], unit: str = " items/s") -> None:
    shown = ", ".join(f"{rate:,.2f}" if rate < 10 else f"{rate:,.0f}" for rate in rates)
    median = statistics.median(rates)
    figure = f"{median:,.2f}" if median < 10 else f"{median:,.0f}"
    print(f"{label}: median {figure}{unit}  (runs: {shown})", flush=True)


def bench_bulk_create(count: int, runs: int) -> None:
    http = client()
    at = database_now() + timedelta(days=1)
    body = json.dumps(items(count, at)).encode()
    print(f"{count:,} items, body {len(body):,} bytes ({len(body) / count:.0f} per item)")
    # One small call of each first: imports, caches, the statements' plans.
    reset()
    post(http, json.dumps(items(10, at)).encode(), 10)
    reset()
    python(10, at)
    rest_rates, python_rates, ratios = [], [], []
    for _round in range(runs):
        reset()
        rest = count / post(http, body, count)
        reset()
        direct = count / python(count, at)
        rest_rates.append(rest)
        python_rates.append(direct)
        ratios.append(rest / direct)
    report(f"POST schedules/bulk/ ({count:,} per request)", rest_rates)
    report(f"api.bulk_create ({count:,} per call)", python_rates)
    report("REST / Python, per round", ratios, unit="")


def bench_bulk_cancel(count: int, runs: int) -> None:
    """``POST schedules/bulk-cancel/`` by ids against ``api.bulk_cancel`` of the same ids."""
    http = client()
    at = database_now() + timedelta(days=1)

    def made() -> list[str]:
        reset()
        return [str(schedule.pk) for schedule in api.bulk_create(specs(count, at))]

    def over_rest(ids: list[str]) -> float:
        body = json.dumps({"ids": ids}).encode()
        started = time.perf_counter()
        response = http.post(CANCEL_PATH, body, content_type="application/json")
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.content[:500]
        assert json.loads(response.content)["cancelled"] == len(ids)
        return elapsed

    def direct(ids: list[str]) -> float:
        refs = [uuid.UUID(i) for i in ids]
        started = time.perf_counter()
        changed = api.bulk_cancel(refs).changed
        elapsed = time.perf_counter() - started
        assert changed == len(ids)
        return elapsed

    over_rest(made()[:10])
    rest_rates, python_rates, ratios = [], [], []
    for _round in range(runs):
        rest = count / over_rest(made())
        python_rate = count / direct(made())
        rest_rates.append(rest)
        python_rates.append(python_rate)
        ratios.append(rest / python_rate)
    report(f"POST schedules/bulk-cancel/ ({count:,} ids per request)", rest_rates)
    report(f"api.bulk_cancel ({count:,} ids per call)", python_rates)
    report("REST / Python, per round", ratios, unit="")


def rss_process(count: int, pad: int) -> None:
    http = client()
    at = database_now() + timedelta(days=1)
    reset()
    post(http, json.dumps(items(10, at)).encode(), 10)
    reset()
    body = json.dumps(items(count, at, pad)).encode()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    post(http, body, count)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"one request of {count:,} items ({len(body) / 2**20:.1f} MiB body): Python memory "
        f"allocated at its peak {peak / 2**20:.0f} MiB; process peak RSS "
        f"{before / 1024:.0f} -> {after / 1024:.0f} MiB"
    )


def bench_rss(count: int, pad: int) -> None:
    subprocess.run(
        [sys.executable, __file__, "rss-process", "--count", str(count), "--pad", str(pad)],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": URL},
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "mode",
        nargs="?",
        default="all",
        choices=["all", "bulk-create", "bulk-cancel", "rss", "rss-process"],
    )
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pad", type=int, default=0, help="rss: more characters of data per item")
    args = parser.parse_args()
    if args.mode == "rss-process":
        rss_process(args.count, args.pad)
        return
    call_command("migrate", verbosity=0)
    if args.mode in ("all", "bulk-create"):
        bench_bulk_create(args.count, args.runs)
    if args.mode in ("all", "bulk-cancel"):
        bench_bulk_cancel(args.count, args.runs)
    if args.mode in ("all", "rss"):
        bench_rss(args.count, args.pad)


if __name__ == "__main__":
    main()
