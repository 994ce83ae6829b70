"""Benchmark of planning RRULE and calendar-filtered schedules against plain crons (no
database): what a batch of 1,000 due rows costs in Python, and the ratio to plain crons.

    .venv/bin/python bench/recurrence_bench.py              # median of 5 runs each
    .venv/bin/python bench/recurrence_bench.py --runs 9

Each batch is the claim's rows (as ``firing.claim`` returns them) planned by
``firing.plan.plan()``, the fire path's own code: its timetable, ``decide()``, the run time
of the next slot, and for a calendar-filtered row the slot it goes on from after a calendar
edit and what the calendars did to its slots (``firing/calendared.py``). The calendars are
handed to ``plan()`` as the batch reads them (built once per version):

* ``cron``: 1,000 per-minute crons in Europe/Brussels, each due for the minute just passed;
* ``rrule``: 1,000 RRULEs in Europe/Brussels (every minute, weekdays every 15 minutes in
  office hours, every second Tuesday, last business day of the month, ...), each due for
  its latest slot;
* ``filtered cron``: the 1,000 per-minute crons of the first case, filtered by a Belgian
  holiday calendar with a weekly blackout (OMIT), and every fourth by BACKWARD.

Each on an ordinary day and on the Friday before the clocks change (BACKWARD moves the
weekend's slots onto it, the Sunday's across the change). The rows of a batch that share
an expression and calendars share their filtered timetable (``firing.calendared.Shared``),
so a second line per day plans crons of which no two are alike (1,000 expressions that all
fire every minute, written differently), plain and filtered: what a row costs alone.

Target: RRULE and filtered crons within 1.2x of plain crons. Prints figures; asserts
nothing. Do not run it on a loaded machine (the figures are ratios within one run, but
note the load beside them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from time import perf_counter
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_bench")

from django_dsched.firing.plan import plan  # noqa: E402
from django_dsched.timetables import CronTimetable, RRuleTimetable  # noqa: E402
from django_dsched.timetables.calendars import Calendar, WeeklyWindow  # noqa: E402
from django_dsched.timetables.filtered import with_calendars  # noqa: E402
from django_dsched.timetables.grid import to_microseconds  # noqa: E402

ZONE = "Europe/Brussels"
RULES = [
    "FREQ=MINUTELY",
    "FREQ=MINUTELY;INTERVAL=15;BYHOUR=8,9,10,11,12,13,14,15,16,17;BYDAY=MO,TU,WE,TH,FR",
    "FREQ=HOURLY;BYMINUTE=0,30",
    "FREQ=DAILY;BYHOUR=9;BYMINUTE=0",
    "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU;BYHOUR=9;BYMINUTE=0",
    "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17;BYMINUTE=0",
    "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=23;BYMINUTE=0",
    "FREQ=YEARLY;BYMONTH=1,4,7,10;BYMONTHDAY=1;BYHOUR=6;BYMINUTE=0",
]
START = datetime(2026, 1, 1, tzinfo=UTC)
CALENDAR_ID = str(uuid.uuid4())
Row = tuple[Any, ...]


def row(
    kind: str,
    next_slot: datetime,
    now: datetime,
    *,
    cron: str = "",
    rrule: str = "",
    calendars: list[str] | None = None,
    policy: str = "OMIT",
) -> Row:
    """A due row as the claim returns it (``firing.claim.CLAIM_COLUMNS``; times in
    microseconds; a calendar-filtered row's last fire at its slot's time, as when it fires
    every minute; overlap ALLOW_ALL, which the claim returns as NULL)."""
    return (
        str(uuid.uuid4()), kind, "", None, to_microseconds(START), to_microseconds(next_slot),
        to_microseconds(now), cron, ZONE, "COALESCE", None, 100, None, None, 0, 0, rrule,
        calendars, policy, None if calendars is None else to_microseconds(next_slot), None,
    )  # fmt: skip


def plan_rows(rows: list[Row], calendars: dict[str, Calendar]) -> int:
    """Plan the batch as the fire path does; the number of rows that fire."""
    decided = plan(rows, None, calendars)
    return sum(slot is not None for slot in decided.slots)


def expressions(alike: bool) -> list[str]:
    """1,000 per-minute cron expressions: all the same, or no two alike (each minute and
    hour field a list of two ranges, split at a different place)."""
    if alike:
        return ["* * * * *"] * 1000
    minutes = [f"0-{a},{a + 1}-59" for a in range(59)]
    hours = ["*", *(f"0-{b},{b + 1}-23" for b in range(23))]
    return [f"{m} {h} * * *" for m in minutes for h in hours][:1000]


def cron_rows(now: datetime, alike: bool = True) -> list[Row]:
    slot = now.replace(second=0, microsecond=0)
    return [row("CRON", slot, now, cron=text) for text in expressions(alike)]


def rrule_rows(now: datetime) -> list[Row]:
    rows: list[Row] = []
    for k in range(1000):
        text = RULES[k % len(RULES)]
        slot = RRuleTimetable(text, ZONE, START).slot_at_or_before(now) or START
        rows.append(row("RRULE", slot, now, rrule=text))
    return rows


def filtered_rows(now: datetime, known: dict[str, Calendar], alike: bool = True) -> list[Row]:
    """Each due at its filtered timetable's latest slot, as the fire path stores it (a slot
    the calendars drop is never stored: only a calendar edit since can leave one)."""
    rows: list[Row] = []
    for k, text in enumerate(expressions(alike)):
        policy = "BACKWARD" if k % 4 == 0 else "OMIT"
        table = with_calendars(CronTimetable(text, ZONE), list(known.values()), policy, ZONE)
        slot = table.slot_at_or_before(now)
        assert slot is not None and now - slot < timedelta(minutes=1), "not a business hour"
        rows.append(row("CRON", slot, now, cron=text, calendars=[CALENDAR_ID], policy=policy))
    return rows


def calendars() -> dict[str, Calendar]:
    freeze = WeeklyWindow(4, time(18), 0, time(6), ZONE, "weekend freeze")
    return {CALENDAR_ID: Calendar.of_holidays("Belgium", "BE", [2026, 2027], windows=(freeze,))}


def median_of(runs: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(runs):
        started = perf_counter()
        work()
        times.append(perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    # A Wednesday mid-morning (business hours, no blackout), and the Friday before DST (the
    # change within two days; the Saturday before is inside the weekend freeze, when no
    # filtered row is due).
    for label, now in (
        ("ordinary day", datetime(2026, 3, 18, 10, 0, 30, tzinfo=UTC)),
        ("Friday before DST", datetime(2026, 3, 27, 10, 0, 30, tzinfo=UTC)),
    ):
        known = calendars()
        alike = {
            "cron": cron_rows(now),
            "rrule": rrule_rows(now),
            "filtered cron": filtered_rows(now, known),
        }
        figures = {
            name: median_of(runs, lambda rows=rows, known=known: plan_rows(rows, known))
            for name, rows in alike.items()
        }
        base = figures["cron"]
        print(
            f"{label}: 1,000 rows each: cron {base:.3f} s, "
            f"rrule {figures['rrule']:.3f} s ({figures['rrule'] / base:.2f}x), "
            f"filtered cron {figures['filtered cron']:.3f} s "
            f"({figures['filtered cron'] / base:.2f}x); target <= 1.2x"
        )
        plain, filtered = cron_rows(now, alike=False), filtered_rows(now, known, alike=False)
        base = median_of(runs, lambda rows=plain, known=known: plan_rows(rows, known))
        cost = median_of(runs, lambda rows=filtered, known=known: plan_rows(rows, known))
        print(
            f"{label}, no two rows alike: cron {base:.3f} s, "
            f"filtered cron {cost:.3f} s ({cost / base:.2f}x)"
        )


if __name__ == "__main__":
    main()
