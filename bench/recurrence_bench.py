"""Benchmark of planning RRULE and calendar-filtered schedules against plain crons (no
database): what a batch of 1,000 due rows costs in Python, and the ratio to plain crons.

    .venv/bin/python bench/recurrence_bench.py              # median of 5 runs each
    .venv/bin/python bench/recurrence_bench.py --runs 9

Each row is planned as the fire path plans a due row that is not on the integer fast path
(``firing.plan._plan_one``): build its timetable, then ``timetables.decide()`` and the run
time of the next slot. RRULE and calendar filters are not wired into ``plan()`` yet, so the
three cases go through that same sequence here:

* ``cron``: 1,000 per-minute crons in Europe/Brussels, each due for the minute just passed;
* ``rrule``: 1,000 RRULEs in Europe/Brussels (every minute, weekdays every 15 minutes in
  office hours, every second Tuesday, last business day of the month, ...), each due for
  its latest slot;
* ``filtered cron``: the 1,000 per-minute crons of the first case, filtered by a Belgian
  holiday calendar with a weekly blackout (OMIT), and every fourth by BACKWARD.

Target: RRULE and filtered crons within 1.2x of plain crons. Prints figures; asserts
nothing. Do not run it on a loaded machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, time
from pathlib import Path
from time import perf_counter
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_bench")

from django_dsched.timetables import Rules, Timetable, backlog_window, decide  # noqa: E402
from django_dsched.timetables.calendars import Calendar, WeeklyWindow  # noqa: E402
from django_dsched.timetables.cron import CronTimetable  # noqa: E402
from django_dsched.timetables.filtered import Filtered, Shift  # noqa: E402
from django_dsched.timetables.rrule import RRuleTimetable  # noqa: E402

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
Row = tuple[str, Callable[[], Timetable], datetime]


def plan_rows(rows: list[Row], now: datetime) -> int:
    """Plan each row as ``firing.plan._plan_one`` does; the number that fire."""
    window = backlog_window()
    fired = 0
    for schedule_id, build, next_slot in rows:
        table = build()
        rules = Rules(jitter_key=schedule_id)
        decision = decide(table, rules, next_slot, now, 0, window)
        if decision.next_slot is not None:
            rules.run_time(table, decision.next_slot)
        fired += decision.slot is not None
    return fired


def cron_rows(now: datetime) -> list[Row]:
    slot = now.replace(second=0, microsecond=0)
    return [
        (str(uuid.uuid4()), lambda: CronTimetable("* * * * *", ZONE), slot) for _ in range(1000)
    ]


def rrule_rows(now: datetime) -> list[Row]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows: list[Row] = []
    for k in range(1000):
        text = RULES[k % len(RULES)]
        table = RRuleTimetable(text, ZONE, start)
        slot = table.slot_at_or_before(now) or start
        rows.append((str(uuid.uuid4()), lambda text=text: RRuleTimetable(text, ZONE, start), slot))
    return rows


def filtered_rows(now: datetime) -> list[Row]:
    freeze = WeeklyWindow(4, time(18), 0, time(6), ZONE, "weekend freeze")
    calendar = Calendar.of_holidays("Belgium", "BE", [2026, 2027], windows=(freeze,))
    slot = now.replace(second=0, microsecond=0)
    rows: list[Row] = []
    for k in range(1000):
        policy = Shift.BACKWARD if k % 4 == 0 else Shift.OMIT

        def build(policy: Shift = policy) -> Timetable:
            return Filtered(CronTimetable("* * * * *", ZONE), [calendar], policy, ZONE)

        rows.append((str(uuid.uuid4()), build, slot))
    return rows


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
    # A Wednesday mid-morning (business hours, no blackout), and the day before DST.
    for label, now in (
        ("ordinary day", datetime(2026, 3, 18, 10, 0, 30, tzinfo=UTC)),
        ("day before DST", datetime(2026, 3, 28, 10, 0, 30, tzinfo=UTC)),
    ):
        figures = {}
        for name, make in (
            ("cron", cron_rows),
            ("rrule", rrule_rows),
            ("filtered cron", filtered_rows),
        ):
            rows = make(now)
            figures[name] = median_of(runs, lambda rows=rows, now=now: plan_rows(rows, now))
        base = figures["cron"]
        print(
            f"{label}: 1,000 rows each: cron {base:.3f} s, "
            f"rrule {figures['rrule']:.3f} s ({figures['rrule'] / base:.2f}x), "
            f"filtered cron {figures['filtered cron']:.3f} s "
            f"({figures['filtered cron'] / base:.2f}x); target <= 1.2x"
        )


if __name__ == "__main__":
    main()
