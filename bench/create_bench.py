"""Benchmark of creating and changing schedules through the Python API.

    .venv/bin/python bench/create_bench.py                      # everything, defaults below
    .venv/bin/python bench/create_bench.py single --count 1000 --runs 5
    .venv/bin/python bench/create_bench.py single-tx --count 2000 --runs 5
    .venv/bin/python bench/create_bench.py single --count 1000 --runs 5 --prepared
    .venv/bin/python bench/create_bench.py state --count 500 --runs 5
    .venv/bin/python bench/create_bench.py bulk-create --count 100000 --runs 5
    .venv/bin/python bench/create_bench.py bulk-cancel --count 100000 --runs 5
    .venv/bin/python bench/create_bench.py rss --count 1000000

``single``: ``api.create_once(delay=...)`` one after the other in autocommit (each its own
transaction, as a web request scheduling a reminder would). ``single-tx``: the same inside
one transaction. ``state``: ``api.pause``, ``api.resume`` and ``api.cancel`` one schedule at
a time in autocommit. ``bulk-create``: ``api.bulk_create`` of one-shot schedules in calls of
``DSCHED_BULK_MAX_ITEMS`` each, all in one transaction, timed twice per run: with the
``api.Once`` specs built call by call inside the timing (the caller's work too), then with
them built beforehand (the calls alone, as a queue's batch insert is measured from its
list of jobs). ``bulk-cancel``: ``api.bulk_cancel``
of as many schedules (by id), in calls of the same size. ``rss``: a separate process (no
query log) creates ``--count`` one-shot schedules in bulk calls, one transaction per call,
and prints its peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``). ``--prepared``:
with ``DSCHED_PREPARE_CREATES = True`` (single creates as server-side prepared statements).

Where the code has no bulk API (before it existed), the bulk modes time a loop of single
calls over ``--fallback-count`` items instead, and say so.

Runs against a ``dsched_create_bench`` database (on the embedded PostgreSQL unless
DATABASE_URL is set). Prints figures (medians of ``--runs``); asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"  # no query log: it would grow with every statement

from setup_django import ROOT, configure

URL = configure("dsched_create_bench")

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import override_settings  # noqa: E402

from django_dsched import api  # noqa: E402
from django_dsched.conf import app_settings  # noqa: E402

COMMON = {"topic": "mail", "event_type": "reminder.send"}
HAS_BULK = hasattr(api, "bulk_create")


def reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE schedule_t, event_store_t, outbox_message_t")


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def report(label: str, rates: list[float], unit: str = "/s") -> None:
    shown = ", ".join(f"{rate:,.0f}" for rate in rates)
    print(f"{label}: median {statistics.median(rates):,.0f}{unit}  (runs: {shown})", flush=True)


def create_singles(count: int, tag: str) -> list[object]:
    return [
        api.create_once(
            f"{tag}-{i}", delay=timedelta(hours=1), data={"user": i}, **COMMON
        ).schedule_id
        for i in range(count)
    ]


def bench_single(count: int, runs: int) -> None:
    rates = []
    for run in range(runs):
        reset()
        rates.append(count / timed(lambda run=run: create_singles(count, f"s{run}")))
    report(f"single create_once, autocommit ({count} per run)", rates)


def bench_single_tx(count: int, runs: int) -> None:
    rates = []
    for run in range(runs):
        reset()

        def body(run: int = run) -> None:
            with transaction.atomic():
                create_singles(count, f"t{run}")

        rates.append(count / timed(body))
    report(f"single create_once, one transaction ({count} per run)", rates)


def bench_state(count: int, runs: int) -> None:
    figures: dict[str, list[float]] = {"pause": [], "resume": [], "cancel": []}
    for run in range(runs):
        reset()
        ids = create_singles(count, f"p{run}")
        figures["pause"].append(count / timed(lambda ids=ids: [api.pause(i) for i in ids]))
        figures["resume"].append(count / timed(lambda ids=ids: [api.resume(i) for i in ids]))
        figures["cancel"].append(count / timed(lambda ids=ids: [api.cancel(i) for i in ids]))
    for verb, rates in figures.items():
        report(f"api.{verb}, autocommit ({count} per run)", rates)


def specs(start: int, count: int) -> list[object]:
    return [
        api.Once(delay=timedelta(hours=1), data={"user": i}, **COMMON)  # type: ignore[attr-defined]
        for i in range(start, start + count)
    ]


def spec_batches(count: int) -> list[list[object]]:
    """``count`` one-shot specs in lists of ``DSCHED_BULK_MAX_ITEMS`` (one per call)."""
    size = app_settings.BULK_MAX_ITEMS
    return [specs(offset, min(size, count - offset)) for offset in range(0, count, size)]


def bulk_create(count: int, batches: list[list[object]] | None = None) -> list[object]:
    """``count`` one-shots in bulk calls in one transaction; the specs are built call by
    call inside it unless ``batches`` gives them built."""
    size = app_settings.BULK_MAX_ITEMS
    ids: list[object] = []
    with transaction.atomic():
        for n, offset in enumerate(range(0, count, size)):
            batch = batches[n] if batches else specs(offset, min(size, count - offset))
            created = api.bulk_create(batch)  # type: ignore[attr-defined]
            ids += [schedule.schedule_id for schedule in created]
    return ids


def bench_bulk_create(count: int, runs: int, fallback: int) -> None:
    rates, calls_alone = [], []
    for run in range(runs):
        reset()
        if HAS_BULK:
            # Both ways each run, the first one alternating (no order bias).
            for alone in (run % 2 == 1, run % 2 == 0):
                reset()
                if alone:
                    batches = spec_batches(count)
                    calls_alone.append(count / timed(lambda b=batches: bulk_create(count, b)))
                else:
                    rates.append(count / timed(lambda: bulk_create(count)))
        else:

            def loop(run: int = run) -> None:
                with transaction.atomic():
                    create_singles(fallback, f"b{run}")

            rates.append(fallback / timed(loop))
    if HAS_BULK:
        report(f"bulk_create of {count:,} one-shot schedules", rates)
        report("same, the calls alone (specs built beforehand)", calls_alone)
    else:
        report(f"no bulk API: a loop of create_once in one transaction ({fallback})", rates)


def bench_bulk_cancel(count: int, runs: int, fallback: int) -> None:
    rates = []
    for run in range(runs):
        reset()
        if HAS_BULK:
            ids = bulk_create(count)
            size = app_settings.BULK_MAX_ITEMS

            def cancel_all(ids: list[object] = ids, size: int = size) -> None:
                with transaction.atomic():
                    for offset in range(0, count, size):
                        api.bulk_cancel(ids[offset : offset + size])  # type: ignore[attr-defined]

            rates.append(count / timed(cancel_all))
        else:
            ids = create_singles(fallback, f"c{run}")

            def loop(ids: list[object] = ids) -> None:
                with transaction.atomic():
                    for schedule_id in ids:
                        api.cancel(schedule_id)

            rates.append(fallback / timed(loop))
    if HAS_BULK:
        report(f"bulk_cancel of {count:,} schedules", rates)
    else:
        report(f"no bulk API: a loop of api.cancel in one transaction ({fallback})", rates)


def rss_process(count: int) -> None:
    """In a child process: create ``count`` schedules in bulk calls, print the peak RSS."""
    size = app_settings.BULK_MAX_ITEMS
    started = time.perf_counter()
    for offset in range(0, count, size):
        with transaction.atomic():
            api.bulk_create(specs(offset, min(size, count - offset)))  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{count} {elapsed:.3f} {peak_kib}", flush=True)


def bench_rss(count: int) -> None:
    if not HAS_BULK:
        print("rss: no bulk API; n/a", flush=True)
        return
    reset()
    output = subprocess.run(
        [sys.executable, str(Path(__file__)), "rss-process", "--count", str(count)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split()
    created, elapsed, peak_kib = int(output[0]), float(output[1]), int(output[2])
    print(
        f"rss: {created:,} one-shot schedules in bulk calls of {app_settings.BULK_MAX_ITEMS}: "
        f"peak RSS {peak_kib / 1024:,.0f} MiB, {created / elapsed:,.0f}/s",
        flush=True,
    )
    reset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "mode",
        nargs="?",
        default="all",
        choices=[
            "all",
            "single",
            "single-tx",
            "state",
            "bulk-create",
            "bulk-cancel",
            "rss",
            "rss-process",
        ],
    )
    parser.add_argument("--count", type=int)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fallback-count", type=int, default=300)
    parser.add_argument(
        "--prepared",
        action="store_true",
        help="with DSCHED_PREPARE_CREATES = True (single creates as prepared statements)",
    )
    args = parser.parse_args()
    if args.mode == "rss-process":
        rss_process(args.count)
        return
    call_command("migrate", verbosity=0)
    if args.prepared:
        override_settings(DSCHED_PREPARE_CREATES=True).enable()
        print("DSCHED_PREPARE_CREATES = True", flush=True)
    modes = ["single", "single-tx", "state", "bulk-create", "bulk-cancel", "rss"]
    for mode in modes if args.mode == "all" else [args.mode]:
        if mode == "single":
            bench_single(args.count or 1000, args.runs)
        elif mode == "single-tx":
            bench_single_tx(args.count or 2000, args.runs)
        elif mode == "state":
            bench_state(args.count or 500, args.runs)
        elif mode == "bulk-create":
            bench_bulk_create(args.count or 100_000, args.runs, args.fallback_count)
        elif mode == "bulk-cancel":
            bench_bulk_cancel(args.count or 100_000, args.runs, args.fallback_count)
        elif mode == "rss":
            bench_rss(args.count or 1_000_000)


if __name__ == "__main__":
    main()
