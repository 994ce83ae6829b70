"""A value at the edge of its type cannot stop the fire path (issue 38).

Every time the claim reads is safe over the whole range PostgreSQL accepts: a schedule whose
``end_ts`` is a valid PostgreSQL timestamp far in the future (year 294270, written by hand or
by a buggy import) once made the claim's microsecond arithmetic overflow (``bigint out of
range``), and the narrowed retry failed the same way: every scheduler lost its session and
its lease about every 1.5 s and fired nothing. Such a row is now set aside with its error and
the rest fires in the same round; the database itself refuses to store it
(``dsched_schedule_times_in_range``), so only a row written before that CHECK (NOT VALID)
can hold one. The largest integers (``fire_count``, ``aggregate_version``, ``max_fires``,
``frequency_time``, ``priority``) are set aside, or passed over, never more.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError

from django_dsched.enums import ScheduleState
from django_dsched.models import Event, Schedule
from django_dsched.scheduler import Scheduler
from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

BIGINT_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def due(db_now, count: int, **fields) -> list[Schedule]:
    return ScheduleFactory.create_batch(count, start_ts=db_now() - timedelta(seconds=5), **fields)


def write(schedule: Schedule, **columns) -> None:
    """Values written straight into the row, as a hand-written UPDATE or a buggy import."""
    assignments = ", ".join(f"{name} = %s" for name in columns)
    sql(
        f"UPDATE schedule_t SET {assignments} WHERE schedule_id = %s",
        [*columns.values(), schedule.schedule_id],
    )


def fired_ids() -> set:
    return set(
        Event.objects.filter(scheduled_ts__isnull=False).values_list("aggregate_id", flat=True)
    )


def one_round() -> Scheduler:
    scheduler = Scheduler(instance_id="survivor")
    scheduler.run_until_idle()
    return scheduler


def test_a_far_future_end_is_set_aside_and_the_five_others_fire(db_now, unchecked):
    healthy = due(db_now, 5)
    [bad] = due(db_now, 1)
    with unchecked("schedule_t"):
        write(bad, end_ts="294270-01-01 00:00:00+00")

    scheduler = one_round()

    assert fired_ids() == {s.schedule_id for s in healthy}
    # The instance kept its session and its lease: no database error at all.
    assert (scheduler.stats.db_errors, scheduler.stats.leaderships) == (0, 1)
    bad.refresh_from_db(fields=["state", "active", "set_aside_reason", "fire_count"])
    assert (bad.state, bad.active, bad.fire_count) == (ScheduleState.SET_ASIDE, False, 0)
    assert "end_ts holds a time outside the years 1 to 9999" in bad.set_aside_reason
    # Set aside with its end made storable (none); what it held is in the reason.
    assert "(end_ts held 294270-01-01 00:00:00+00)" in bad.set_aside_reason


LATE = ["infinity", "294276-12-31 23:59:59+00", "10000-01-01 00:00:00+00"]  # PostgreSQL's last
EARLY = ["-infinity", "4713-11-24 00:00:00+00 BC", "0001-01-01 00:00:00+00 BC"]  # and first


@pytest.mark.parametrize(
    ("column", "value"),
    [(column, value) for column in ("start_ts", "next_slot_ts") for value in LATE + EARLY]
    # An end before the start is refused by another CHECK.
    + [("end_ts", value) for value in LATE],
)
def test_every_time_the_claim_reads_is_safe_over_postgresql_s_whole_range(
    db_now, unchecked, column, value
):
    healthy = due(db_now, 3)
    [bad] = due(db_now, 1)
    with unchecked("schedule_t"):
        write(bad, **{column: value})

    scheduler = one_round()

    assert fired_ids() == {s.schedule_id for s in healthy}
    assert scheduler.stats.db_errors == 0
    state, reason = sql(
        "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s",
        [bad.schedule_id],
    )[0]
    assert state == ScheduleState.SET_ASIDE
    assert column in reason


def test_the_database_refuses_to_store_such_a_time(db_now):
    [schedule] = due(db_now, 1)
    for column in ("start_ts", "end_ts", "next_run_ts", "next_slot_ts", "paused_until"):
        with pytest.raises(IntegrityError, match="dsched_schedule_times_in_range"):
            write(schedule, **{column: "294270-01-01 00:00:00+00"})
    with pytest.raises(IntegrityError, match="dsched_schedule_times_in_range"):
        write(schedule, end_ts="infinity")


@pytest.mark.parametrize(
    ("columns", "outcome"),
    [
        # Its fire cannot be counted: the database refuses the fire, and it is set aside.
        ({"fire_count": BIGINT_MAX}, ScheduleState.SET_ASIDE),
        ({"max_fires": INT_MAX}, ScheduleState.ACTIVE),  # fires, far from its limit
        # It fires once; its next slot is past the calendar's end: it completes.
        ({"frequency_time": INT_MAX, "frequency_unit": "YEARS"}, ScheduleState.COMPLETED),
        ({"frequency_time": INT_MAX, "frequency_unit": "DAYS"}, ScheduleState.COMPLETED),
        ({"frequency_time": INT_MAX, "frequency_unit": "SECONDS"}, ScheduleState.ACTIVE),
        ({"priority": 32767}, ScheduleState.ACTIVE),
        ({"priority": -32768}, ScheduleState.ACTIVE),
        # Its version cannot go up at all: neither fired nor set aside, it is passed over.
        ({"aggregate_version": BIGINT_MAX}, ScheduleState.ACTIVE),
    ],
    ids=lambda value: "-".join(map(str, value)) if isinstance(value, dict) else str(value),
)
def test_the_largest_integers_are_set_aside_or_passed_over_never_more(db_now, columns, outcome):
    healthy = due(db_now, 4)
    [edge] = due(db_now, 1)
    write(edge, **columns)

    scheduler = one_round()

    assert {s.schedule_id for s in healthy} <= fired_ids()
    assert scheduler.stats.leaderships == 1
    edge.refresh_from_db(fields=["state"])
    assert edge.state == outcome
    if "aggregate_version" in columns:
        assert scheduler.stats.quarantined == 1
        assert edge.schedule_id not in fired_ids()


@pytest.mark.parametrize("column", ["paused_until", "created_ts"])
def test_a_time_the_claim_does_not_read_is_found_by_the_write_and_set_aside(
    db_now, unchecked, column
):
    """The CHECK refuses the fire of a row still holding such a time (written before it):
    the batch narrows down to it, and it is set aside with its times made storable."""
    healthy = due(db_now, 3)
    [bad] = due(db_now, 1)
    with unchecked("schedule_t"):
        write(bad, **{column: "infinity"})

    scheduler = one_round()

    assert fired_ids() == {s.schedule_id for s in healthy}
    assert (scheduler.stats.refused, scheduler.stats.leaderships) == (1, 1)
    state, reason = sql(
        "SELECT state, set_aside_reason FROM schedule_t WHERE schedule_id = %s",
        [bad.schedule_id],
    )[0]
    assert state == ScheduleState.SET_ASIDE
    assert 'violates check constraint "dsched_schedule_times_in_range"' in reason
    assert f"({column} held infinity)" in reason


def test_a_last_fire_time_out_of_range_is_written_over_by_the_next_fire(db_now, unchecked):
    [row] = due(db_now, 1)
    with unchecked("schedule_t"):
        write(row, last_fired_ts="infinity")
    assert one_round().stats.refused == 0
    assert fired_ids() == {row.schedule_id}
    row.refresh_from_db(fields=["last_fired_ts", "state"])
    assert row.state == ScheduleState.ACTIVE and row.last_fired_ts.year == db_now().year
