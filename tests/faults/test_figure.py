"""The figure: with bad rows in every loop at once (refused, or holding values at the edges
of their types), the healthy schedules' fire lag p99 stays within one poll interval plus a
lease of what it is without them, every message is delivered once, and the number of leader
elections does not move.

A scheduler and a relay run in-process, a round each in turn, for a few seconds: first
with healthy schedules alone, then with the bad rows added. Lag is each fire's write time
(``event_ts``, the database's ``statement_timestamp()``) minus its slot.
"""

from __future__ import annotations

import statistics
from datetime import timedelta

import pytest

from django_dsched.conf import app_settings
from django_dsched.enums import ScheduleState
from django_dsched.outbox.relay import Relay
from django_dsched.scheduler.retention_worker import worker_for
from tests.factories import ScheduleFactory
from tests.faults.harness import (
    BIGINT_MAX,
    deep_json,
    drive_all,
    elections,
    every_second,
    leader,
    refusing_all,
    write_by_hand,
)
from tests.faults.history import delivered_fires, missing_days
from tests.helpers import sql
from tests.integration.test_cluster import check_every_slot_fired_once_in_both_tables
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

RUN = 4.0  # seconds per run


def lags(schedules, since, until) -> list[float]:
    rows = sql(
        "SELECT extract(epoch FROM event_ts - scheduled_ts) FROM event_store_t"
        " WHERE scheduled_ts IS NOT NULL AND aggregate_id = ANY(%s)"
        " AND scheduled_ts >= %s AND scheduled_ts < %s",
        [[s.pk for s in schedules], since, until],
    )
    return [float(lag) for (lag,) in rows]


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def bad_rows(db_now, unchecked) -> tuple[list[tuple[str, str, str]], str]:
    """One bad row, or more, in each loop; the rules that refuse them, and the message whose
    outcome is refused (sent at each attempt: at least once, by design)."""
    start = db_now() - timedelta(seconds=2)
    refused_fire, odd_next, odd_count = every_second(start, 3)
    with unchecked("schedule_t"):  # as written before the range CHECK
        write_by_hand("schedule_t", "schedule_id", odd_next.pk, next_slot_ts="'infinity'")
    write_by_hand("schedule_t", "schedule_id", odd_count.pk, fire_count=str(BIGINT_MAX))
    refused_resume, odd_pause = ScheduleFactory.create_batch(
        2,
        paused=True,
        start_ts=start,
        paused_until=db_now() - timedelta(seconds=1),
    )
    with unchecked("schedule_t"):
        write_by_hand("schedule_t", "schedule_id", odd_pause.pk, paused_until="'-infinity'")
    refused_settle, deep = make_messages(2)
    write_by_hand("event_store_t", "id", deep, payload=f"'{deep_json(10_000)}'::jsonb")
    day, _ = missing_days(5, 6)
    [refused_move] = delivered_fires(day, 1)
    rules = [
        (
            "schedule_t",
            f"{{r}}.schedule_id = '{refused_fire.pk}' AND {{r}}.fire_count > 0",
            "check",
        ),
        (
            "schedule_t",
            f"{{r}}.schedule_id = '{refused_resume.pk}' AND {{r}}.state = 'ACTIVE'",
            "trigger",
        ),
        (
            "outbox_message_t",
            f"{{r}}.id = '{refused_settle}' AND {{r}}.status = 'DELIVERED'",
            "trigger",
        ),
        ("outbox_message_t_default", f"{{r}}.id = '{refused_move}'", "trigger"),
        ("scheduler_instance_t", "{r}.instance_id = 'survivor'", "check"),
    ]
    return rules, str(refused_settle)


def test_bad_rows_in_every_loop_cost_the_healthy_schedules_no_lag_and_no_election(
    db_now, delivered, unchecked
):
    healthy = every_second(db_now(), 20)
    scheduler, relay = leader(), Relay(instance_id="relay")
    upkeep = worker_for(lambda: True, "survivor", "default", pause=0.5)
    loops = [scheduler, relay]
    try:
        drive_all(loops, 1)
        clean_from = db_now()
        drive_all(loops, RUN)
        clean_until = db_now()
        before = elections()
        rules, resent = bad_rows(db_now, unchecked)
        with refusing_all(rules):
            upkeep._purge()
            bad_from = db_now()
            drive_all(loops, RUN)
            upkeep._purge()
            bad_until = db_now()
    finally:
        for loop in loops:
            loop.shutdown()
    clean, bad = lags(healthy, clean_from, clean_until), lags(healthy, bad_from, bad_until)
    bound = p99(clean) + float(app_settings.POLL_INTERVAL) + float(app_settings.LEASE_SECONDS)
    print(f"\nfire lag p99: {p99(clean):.3f} s clean, {p99(bad):.3f} s with bad rows in every loop")
    assert len(bad) >= len(healthy) * (RUN - 1)
    assert p99(bad) <= bound, (p99(clean), p99(bad))
    assert (elections(), scheduler.stats.leaderships) == (before, 1)
    aside = sql("SELECT count(*) FROM schedule_t WHERE state = %s", [ScheduleState.SET_ASIDE])
    assert aside[0][0] >= 3
    others = [message for message in delivered if message != resent]
    assert len(others) == len(set(others)) and delivered.count(resent) == 3
    check_every_slot_fired_once_in_both_tables()
