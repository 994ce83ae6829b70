"""Benchmark of the fire path's planning step alone (no database): what one batch costs in
Python before its write.

    .venv/bin/python bench/plan_bench.py                # all cases, median of 5 runs each
    .venv/bin/python bench/plan_bench.py --runs 9

Cases:
* ``cron``: 1,000 per-minute crons in Europe/Brussels, on an ordinary day and the day
  before a DST change (each due for the minute that just passed);
* ``catch-up``: 4 every-second crons with CATCH_UP and catch_up_limit 10,000, four hours
  behind: the first batch, then the next one (a second later).

Rows are built as the claim returns them and planned by ``firing.plan.plan()``. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_bench")

from django_dsched.firing.plan import plan  # noqa: E402
from django_dsched.timetables.grid import to_microseconds  # noqa: E402

Row = tuple[Any, ...]


def cron_row(expression: str, zone: str, next_slot: datetime, now: datetime, **rules: Any) -> Row:
    start = to_microseconds(next_slot - timedelta(days=30))
    return (
        str(uuid.uuid4()),
        "CRON",
        "",
        None,
        start,
        to_microseconds(next_slot),
        to_microseconds(now),
        expression,
        zone,
        rules.get("policy", "COALESCE"),
        None,
        rules.get("limit", 100),
        None,
        None,
        0,
        0,
        "",
        None,
        "OMIT",
        None,
        None,  # the overlap column: ALLOW_ALL (firing/claim.py, OVERLAP)
    )


def per_minute_crons(now: datetime) -> list[Row]:
    slot = now.replace(second=0, microsecond=0)
    return [cron_row("* * * * *", "Europe/Brussels", slot, now) for _ in range(1000)]


def catch_up_rows(now: datetime) -> list[Row]:
    behind = now.replace(microsecond=0) - timedelta(hours=4)
    return [
        cron_row("* * * * * *", "UTC", behind, now, policy="CATCH_UP", limit=10_000)
        for _ in range(4)
    ]


def median_of(runs: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs

    ordinary = datetime(2026, 3, 18, 12, 0, 30, tzinfo=UTC)
    before_dst = datetime(2026, 3, 28, 12, 0, 30, tzinfo=UTC)  # Brussels springs forward
    for label, now in (("ordinary day", ordinary), ("day before DST", before_dst)):
        rows = per_minute_crons(now)
        seconds = median_of(runs, lambda rows=rows: plan(rows))
        print(f"cron: 1,000 per-minute crons (Europe/Brussels), {label}: {seconds:.3f} s")

    now = datetime(2026, 5, 4, 12, 0, 0, 500_000, tzinfo=UTC)

    def first_then_next() -> tuple[float, float]:
        rows = catch_up_rows(now)
        started = time.perf_counter()
        decided = plan(rows)
        first = time.perf_counter() - started
        later = to_microseconds(now + timedelta(seconds=1))
        following = [
            (*row[:5], next_slot, later, *row[7:])
            for row, next_slot in zip(rows, decided.next_slots, strict=True)
        ]
        started = time.perf_counter()
        plan(following)
        return first, time.perf_counter() - started

    pairs = [first_then_next() for _ in range(runs)]
    print(
        "catch-up: 4 every-second crons, limit 10,000, 4 h behind: first batch "
        f"{statistics.median(p[0] for p in pairs):.3f} s, next batch "
        f"{statistics.median(p[1] for p in pairs):.3f} s"
    )


if __name__ == "__main__":
    main()
