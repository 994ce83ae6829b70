"""The fire path (the leader's batches): rows the database refuses, rows holding values at
the edges of their types, and the database gone in the middle of a batch. The healthy
schedules fire in the same rounds, each bad row is set aside with its error (shown by
``dsched show``) or passed over for a while (logged), no lease changes hands, and every slot
fires once. Several bad rows at once, one per variant: each is found alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_dsched.enums import ScheduleState
from django_dsched.models import Schedule
from tests.faults.harness import (
    BIGINT_MAX,
    INTEGER_MAX,
    LAST_TIMESTAMP,
    REFUSALS,
    SMALLINT_MAX,
    deep_json,
    drive,
    elections,
    every_second,
    fire_times,
    leader,
    refusing_all,
    shown,
    terminated_at,
    write_by_hand,
)
from tests.helpers import sql
from tests.integration.test_cluster import check_every_slot_fired_once_in_both_tables

pytestmark = pytest.mark.django_db(transaction=True)

# Where the database refuses a bad row's fire: its schedule's update, its event, its outbox
# message (each written by the one fire statement).
REFUSED_AT = {
    "schedule_t": "{r}.schedule_id = '%s' AND {r}.fire_count > 0",
    "event_store_t": "{r}.aggregate_id = '%s' AND {r}.scheduled_ts IS NOT NULL",
    "outbox_message_t": "{r}.aggregate_id = '%s'",
}


def fired_since(healthy, since, times: int = 1) -> bool:
    return all(len(t) >= times for t in fire_times(healthy, since).values())


def test_fires_the_database_refuses(db_now):
    """A CHECK ... NOT VALID and a trigger RAISE at each of the fire's three writes: six
    bad rows, each set aside with the database's error in the round that meets it."""
    start = db_now() - timedelta(seconds=2)
    healthy = every_second(start, 5)
    variants = [(table, how) for table in REFUSED_AT for how in REFUSALS]
    bad = {
        v: every_second(start, 1, schedule_name=f"poison-{n}")[0] for n, v in enumerate(variants)
    }
    rules = [(table, REFUSED_AT[table] % bad[table, how].pk, how) for table, how in variants]
    scheduler = leader()
    try:
        with refusing_all(rules):
            since = db_now()
            drive(scheduler, 5, until=lambda: fired_since(healthy, since))
            before = elections()
            drive(scheduler, 5, until=lambda: fired_since(healthy, since, 2))
    finally:
        scheduler.shutdown()
    for (table, how), schedule in bad.items():
        schedule.refresh_from_db()
        assert (schedule.state, schedule.fire_count) == (ScheduleState.SET_ASIDE, 0), table
        expected = "CheckViolation (23514)" if how == "check" else "RaiseException (P0001)"
        assert expected in schedule.set_aside_reason
        assert expected in shown(schedule.schedule_name)
    assert fired_since(healthy, since, 2)
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.refused) == (before, 1, 6)
    check_every_slot_fired_once_in_both_tables()


# Values a row can hold that no door lets in, written by hand; each on a row of its own.
EDGES = {
    "next run=-infinity": {"next_run_ts": "'-infinity'"},
    "next slot=infinity": {"next_slot_ts": "'infinity'"},
    "start=-infinity": {"start_ts": "'-infinity'"},
    "end=infinity": {"end_ts": "'infinity'"},
    "fires=max bigint": {"fire_count": str(BIGINT_MAX)},
    "version=max bigint": {"aggregate_version": str(BIGINT_MAX)},
    "every integer at its max": {
        "frequency_time": str(INTEGER_MAX),
        "max_fires": str(INTEGER_MAX),
        "misfire_grace_seconds": str(INTEGER_MAX),
        "jitter_seconds": "86400",  # the largest dsched_schedule_timing_bounds allows
        "catch_up_limit": "10000",
        "misfire_policy": "'CATCH_UP'",
        "priority": str(SMALLINT_MAX),
    },
    "data 10,000 deep": {"event_data": f"'{deep_json(10_000)}'::jsonb"},
    "data of 8 MB": {"event_data": "jsonb_build_object('x', repeat('x', 8 * 1024 * 1024))"},
    # Times whose microseconds since 1970 overflow a bigint (the claim's arithmetic).
    "start=year 294276": {"start_ts": LAST_TIMESTAMP, "end_ts": "NULL"},
    "end=year 294276": {"end_ts": LAST_TIMESTAMP},
}


def edge_rows(db_now, unchecked, edges) -> tuple[list[Schedule], dict[str, Schedule]]:
    """The database refuses these times now (the range CHECK): they are written as rows
    written before it hold them (``unchecked``)."""
    start = db_now() - timedelta(seconds=2)
    healthy = every_second(start, 5)
    bad = {}
    for n, (what, columns) in enumerate(edges.items()):
        [row] = every_second(start, 1, schedule_name=f"edge-{n}")
        with unchecked("schedule_t"):
            assert write_by_hand("schedule_t", "schedule_id", row.pk, **columns), what
        bad[what] = row
    return healthy, bad


def fires_on_around(db_now, healthy, bad, patience: float = 5) -> None:
    scheduler = leader()
    try:
        since = db_now()
        drive(scheduler, patience, until=lambda: fired_since(healthy, since))
        before = elections()
        drive(scheduler, patience, until=lambda: fired_since(healthy, since, 2))
    finally:
        scheduler.shutdown()
    assert fired_since(healthy, since, 2)
    assert (elections(), scheduler.stats.leaderships) == (before, 1)
    # Each bad row fired, or was set aside with its error, or is passed over for a while.
    for what, row in bad.items():
        state, reason = sql(
            "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s", [row.pk]
        )[0]
        if state == ScheduleState.SET_ASIDE:
            assert reason, what
        elif str(row.pk) in scheduler._quarantine.until:
            assert scheduler.stats.quarantined
    check_every_slot_fired_once_in_both_tables()


def test_rows_at_the_edges_of_their_types(db_now, unchecked):
    fires_on_around(db_now, *edge_rows(db_now, unchecked, EDGES))


# The statements of a leader's round: the heartbeat, the claim, the write (the fire).
ROUND = (
    r"^\s*UPDATE scheduler_lock_t\s+SET last_heartbeat = clock_timestamp",
    r"FOR UPDATE SKIP LOCKED",
    r"^\s*WITH fence AS .*UPDATE schedule_t s\s+SET next_slot_ts",
)


def test_the_database_gone_in_the_middle_of_a_round(db_now):
    """The leader's session is ended at each statement of its round in turn (as by a server
    restart): each time the loop reconnects and leads again, one election per outage at
    most, and nothing is lost or doubled."""
    start = db_now() - timedelta(seconds=2)
    healthy = every_second(start, 5)
    scheduler = leader()
    try:
        drive(scheduler, 0.2)
        before = elections()
        since = db_now()
        with terminated_at(*ROUND) as met:
            drive(scheduler, 10, until=lambda: len(met) == len(ROUND))
        drive(scheduler, 5, until=lambda: fired_since(healthy, since, 2))
    finally:
        scheduler.shutdown()
    assert sorted(met) == sorted(ROUND) and scheduler.stats.db_errors >= len(ROUND)
    assert elections() - before <= len(ROUND)
    assert fired_since(healthy, since, 2)
    check_every_slot_fired_once_in_both_tables()
    assert not Schedule.objects.filter(state=ScheduleState.SET_ASIDE).exists()
