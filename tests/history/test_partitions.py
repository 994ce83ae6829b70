"""The history tables by day: where rows land, what makes a day, what drops one, what holds it.

Real PostgreSQL, real partitions: ``event_store_t`` and ``outbox_message_t`` are partitioned
by id (a fire's id carries its slot's time), one partition per UTC day and a default one.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.urls import reverse

from django_dsched import api
from django_dsched.changes import edits
from django_dsched.checks.partitions import check_history_partitions
from django_dsched.enums import DeliveryStatus
from django_dsched.history import expiry, partitions
from django_dsched.history.event_ids import change_id, event_id
from django_dsched.history.partitions import (
    DAYS_AHEAD,
    EVENTS,
    LOCK_TIMEOUT_MS,
    OUTBOX,
    day_of,
    make_ahead,
    make_day,
    partition,
)
from django_dsched.models import Event, OutboxMessage, Schedule
from django_dsched.outbox import dead_letters
from django_dsched.outbox.retention import count_expired, purge_expired
from tests.factories import ScheduleFactory
from tests.helpers import other_session, second_event, sql

pytestmark = pytest.mark.django_db(transaction=True)


def today() -> date:
    return sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]


def exists(name: str) -> bool:
    return bool(sql("SELECT to_regclass(%s) IS NOT NULL", [name])[0][0])


def where(table: str, id_: Any) -> str:
    """The partition holding the row ``id_`` of ``table``."""
    return sql(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [id_])[0][0]


@pytest.fixture
def days() -> Iterator[list[date]]:
    """Days a test makes; their partitions are dropped afterwards (the next test sees the
    days ``migrate`` made, as every test does)."""
    made: list[date] = []
    yield made
    for day in made:
        for table in (OUTBOX, EVENTS):
            sql(f"DROP TABLE IF EXISTS {partition(table, day)}")


def fires(
    day: date,
    count: int,
    *,
    status: str = DeliveryStatus.DELIVERED,
    delivered: datetime | None = None,
) -> list[uuid.UUID]:
    """``count`` fires (events and messages) of one schedule at slots on ``day``, written as
    the fire path writes them (ids by the event-id rule), each delivered a minute after its
    slot unless ``delivered`` or another status is given."""
    schedule = uuid.uuid4()
    start = datetime(day.year, day.month, day.day, 1, tzinfo=UTC)
    slots = [start + timedelta(seconds=n) for n in range(count)]
    ids = [event_id(schedule, slot) for slot in slots]
    sql(
        """
        WITH f AS (
            SELECT * FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[]) AS f(id, slot)
        ), e AS (
            INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, payload, metadata, scheduled_ts)
            SELECT f.id, %(host)s, %(schedule)s, 'Schedule', row_number() OVER (ORDER BY slot),
                   'report.build', f.slot, '{}'::jsonb, '{}'::jsonb, f.slot
            FROM f
        )
        INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
            aggregate_version, event_type, event_ts, topic, status, delivered_ts)
        SELECT f.id, %(host)s, %(schedule)s, 'Schedule', 1, 'report.build', f.slot, 'reports',
               %(status)s,
               CASE WHEN %(status)s = 'DELIVERED'
                    THEN coalesce(%(delivered)s, f.slot + interval '1 minute') END
        FROM f
        """,
        {
            "ids": ids,
            "slots": slots,
            "host": uuid.UUID(int=0),
            "schedule": schedule,
            "status": str(status),
            "delivered": delivered,
        },
    )
    return ids


# -- the tables and where rows land -------------------------------------------------------------


def test_migrate_makes_partitioned_tables_a_default_partition_and_the_days_ahead():
    kinds = dict(
        sql("SELECT relname, relkind FROM pg_class WHERE relname = ANY(%s)", [[EVENTS, OUTBOX]])
    )
    assert kinds == {EVENTS: "p", OUTBOX: "p"}
    first = today()
    assert partitions.days() == [first + timedelta(days=n) for n in range(DAYS_AHEAD + 1)]
    for table in (EVENTS, OUTBOX):
        assert exists(f"{table}_default")
        for n in range(DAYS_AHEAD + 1):
            assert exists(partition(table, first + timedelta(days=n)))
    # A day's bounds: its first millisecond in the id's top 48 bits.
    assert partitions.bound(date(2026, 11, 27)).int >> 80 == 1_795_737_600_000
    assert day_of(partitions.bound(date(2026, 11, 27))) == date(2026, 11, 27)


def test_a_fire_lands_in_its_slot_s_day_with_its_message(days):
    day = today() - timedelta(days=3)
    make_day(day)
    days.append(day)
    ScheduleFactory(
        schedule_name="hourly",
        frequency_unit="HOURS",
        start_ts=datetime(day.year, day.month, day.day, tzinfo=UTC),
    )
    start = datetime(day.year, day.month, day.day, 5, tzinfo=UTC)
    fired, _ = api.backfill("hourly", start, start + timedelta(hours=1))
    assert fired == 2
    events = Event.objects.filter(scheduled_ts__isnull=False)
    assert len(events) == 2
    for event in events:
        assert where(EVENTS, event.id) == partition(EVENTS, day)
        assert where(OUTBOX, event.id) == partition(OUTBOX, day)


def test_a_fire_for_a_day_with_no_partition_goes_to_the_default_one_until_the_day_is_made(days):
    """A fire never fails for a missing partition: the default one takes it; making the day
    later moves its rows into the day's own partitions (in one transaction)."""
    day = today() - timedelta(days=20)  # no partition: migrate made today and the next days
    ScheduleFactory(
        schedule_name="hourly",
        frequency_unit="HOURS",
        start_ts=datetime(day.year, day.month, day.day, tzinfo=UTC),
    )
    start = datetime(day.year, day.month, day.day, 5, tzinfo=UTC)
    assert api.backfill("hourly", start, start + timedelta(hours=2)) == (3, 0)
    ids = list(Event.objects.filter(scheduled_ts__isnull=False).values_list("id", flat=True))
    assert {where(EVENTS, id_) for id_ in ids} == {f"{EVENTS}_default"}
    assert {where(OUTBOX, id_) for id_ in ids} == {f"{OUTBOX}_default"}

    days.append(day)
    assert make_day(day) == 6  # three events and their three messages
    assert {where(EVENTS, id_) for id_ in ids} == {partition(EVENTS, day)}
    assert {where(OUTBOX, id_) for id_ in ids} == {partition(OUTBOX, day)}
    assert sql(f"SELECT count(*) FROM {EVENTS}_default WHERE scheduled_ts IS NOT NULL") == [(0,)]
    # The slots still fired once: a second backfill finds them.
    assert api.backfill("hourly", start, start + timedelta(hours=2)) == (0, 3)


def test_make_ahead_makes_the_missing_days_and_moves_what_the_default_holds(days):
    last = today() + timedelta(days=DAYS_AHEAD + 1)
    [early] = fires(last, 1, status=DeliveryStatus.PENDING)  # before its day exists
    assert where(OUTBOX, early) == f"{OUTBOX}_default"
    days.append(last)
    made = make_ahead(ahead=DAYS_AHEAD + 1)
    assert made.made == (last,)
    assert made.moved == 2
    assert where(OUTBOX, early) == partition(OUTBOX, last)
    assert where(EVENTS, early) == partition(EVENTS, last)
    assert make_ahead(ahead=DAYS_AHEAD + 1) == partitions.Made()  # nothing left to make


def test_the_database_refuses_a_second_event_for_a_slot_whatever_the_writer(days):
    """The exactly-once rule on a table partitioned by id: an event's id must carry its slot's
    millisecond (CHECK dsched_event_slot_in_id), so every event of a slot goes to one
    partition, whose unique index refuses a second one, with the same id or another; in a
    day's partition, in the default one, and in a day made after the first event."""
    far = today() - timedelta(days=20)  # no partition: the default one
    for day in (today(), far):
        [id_] = fires(day, 1)
        event = Event.objects.get(pk=id_)
        second = {
            "host_id": event.host_id,
            "aggregate_id": event.aggregate_id,
            "aggregate_version": 99,
            "event_type": event.event_type,
            "event_ts": event.event_ts,
            "payload": {},
            "scheduled_ts": event.scheduled_ts,
        }
        with pytest.raises(IntegrityError, match="dsched_event_slot_in_id"), transaction.atomic():
            Event.objects.create(id=uuid.uuid4(), **second)
        with (
            pytest.raises(IntegrityError, match="dsched_event_one_per_slot_"),
            transaction.atomic(),
        ):
            Event.objects.create(id=change_id(event.scheduled_ts), **second)
        with pytest.raises(IntegrityError, match=r"pkey|one_per_slot"), transaction.atomic():
            Event.objects.create(id=id_, **second)
        # A slot of its own, with the rule's id, is taken; a change (no slot) has any id.
        later = event.scheduled_ts + timedelta(seconds=30)
        Event.objects.create(
            **{**second, "scheduled_ts": later}, id=event_id(event.aggregate_id, later)
        )
        Event.objects.create(**{**second, "scheduled_ts": None}, id=uuid.uuid4())
    # The far day made now: its rows move in, its index made with them, and it still refuses.
    days.append(far)
    make_day(far)
    refused = f"dsched_event_one_per_slot_{far:%Y%m%d}"
    with pytest.raises(IntegrityError, match=refused), transaction.atomic():
        Event.objects.create(id=change_id(event.scheduled_ts), **second)


def test_audit_events_are_stored_in_the_day_of_their_change_by_the_database_clock(db_now):
    """Every door's change event has an id with the change's time (database clock) in its top
    bits: created (single and bulk), edited, paused, resumed, cancelled, set aside."""
    api.create_interval("one", every=1, unit="HOURS", topic="t", event_type="x")
    api.bulk_create(
        [
            api.Interval(name=f"bulk-{n}", every=1, unit="HOURS", topic="t", event_type="x")
            for n in range(3)
        ]
    )
    api.pause("one")
    api.resume("one")
    one = Schedule.objects.get(schedule_name="one")
    one.event_topic = "other"
    edits.save_schedule(one, ["event_topic"], actor="test")
    api.cancel("bulk-0")
    changes = list(Event.objects.filter(scheduled_ts__isnull=True))
    verbs = {event.event_type.rsplit(".", 1)[1] for event in changes}
    assert {"created", "paused", "resumed", "edited", "cancelled"} <= verbs
    for event in changes:
        millis = event.id.int >> 80
        assert millis == int(event.event_ts.timestamp() * 1000), event.event_type
        assert where(EVENTS, event.id) == partition(EVENTS, event.event_ts.astimezone(UTC).date())
        assert event.id.version == 7


# -- retention: whole days ----------------------------------------------------------------------


def old_day(days: list[date], ago: int) -> date:
    day = today() - timedelta(days=ago)
    make_day(day)
    days.append(day)
    return day


def test_an_expired_day_goes_whole_and_nothing_else_does(days, settings):
    settings.DSCHED_RETENTION_DAYS = 45
    expired = old_day(days, 50)
    kept = old_day(days, 40)
    gone = fires(expired, 100)
    stays = fires(kept, 10) + fires(today(), 10)
    purged = purge_expired()
    assert purged.days == (expired,)
    assert (purged.outbox, purged.events, purged.held) == (0, 0, ())
    assert not exists(partition(EVENTS, expired)) and not exists(partition(OUTBOX, expired))
    assert not Event.objects.filter(id__in=gone).exists()
    assert Event.objects.filter(id__in=stays).count() == 20
    assert OutboxMessage.objects.filter(id__in=stays).count() == 20
    assert purge_expired().days == ()


def test_a_day_whose_end_is_within_the_retention_stays(days, settings):
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 45)  # it ends 44 days ago (and some hours)
    fires(day, 3)
    assert purge_expired().days == ()
    assert exists(partition(EVENTS, day))


def test_pending_messages_and_dead_letters_hold_their_day_until_they_settle(days, settings, capsys):
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 60)
    delivered = fires(day, 50)
    [pending] = fires(day, 1, status=DeliveryStatus.PENDING)
    [dead] = fires(day, 1, status=DeliveryStatus.DELIVERY_FAILED)

    purged = purge_expired()
    assert purged.days == ()
    assert purged.held == (expiry.Held(day, pending=1, dead=1),)
    assert Event.objects.filter(id__in=[*delivered, pending, dead]).count() == 52
    call_command("purge_history")
    out = capsys.readouterr().out
    assert f"Kept {day:%Y-%m-%d} held by 1 pending message(s), 1 dead letter(s)." in out
    call_command("dsched", "cluster")
    out = capsys.readouterr().out
    assert f"kept past the retention: {day:%Y-%m-%d} held by 1 pending message(s)" in out

    # The pending one is delivered (by a relay: here by hand); the dead letter still holds.
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = %s WHERE id = %s",
        [datetime(day.year, day.month, day.day, 2, tzinfo=UTC), pending],
    )
    assert purge_expired().held == (expiry.Held(day, pending=0, dead=1),)
    # An operator discards it: the day goes, the dead letter's event with it.
    dead_letters.discard(OutboxMessage.objects.filter(pk=dead))
    assert purge_expired().days == (day,)
    assert not Event.objects.filter(id__in=[*delivered, pending, dead]).exists()


def test_a_late_delivery_holds_its_day_until_it_too_is_older_than_the_retention(days, settings):
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 60)
    fires(day, 5)
    recently = datetime.now(UTC) - timedelta(days=2)
    fires(day, 1, delivered=recently)  # a dead letter retried and delivered two days ago
    [held] = purge_expired().held
    assert (held.day, held.pending, held.dead) == (day, 0, 0)
    assert held.latest is not None and abs(held.latest - recently) < timedelta(seconds=1)
    assert purge_expired(days=1).days == (day,)


def test_the_dry_run_counts_the_days_and_drops_nothing(days, settings, capsys):
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 50)
    fires(day, 7)
    found = count_expired()
    assert (found.days, found.day_events, found.day_outbox) == ((day,), 7, 7)
    call_command("purge_history", dry_run=True)
    assert f"Would drop the days {day:%Y-%m-%d} (7 event(s), 7 outbox message(s))." in (
        capsys.readouterr().out
    )
    assert exists(partition(EVENTS, day))


def test_a_drop_waits_for_its_lock_no_longer_than_the_timeout_and_the_next_pass_drops(
    days, settings
):
    """DROP needs an ACCESS EXCLUSIVE lock on the parents, and fires queue behind a DROP that
    waits: so it waits LOCK_TIMEOUT_MS at most, gives up, and a later pass drops the day."""
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 50)
    fires(day, 3)
    with other_session() as other, other.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT count(*) FROM outbox_message_t")  # a long reader
        started = time.monotonic()
        purged = purge_expired()
        waited = time.monotonic() - started
        cursor.execute("ROLLBACK")
    assert purged.days == () and purged.skipped == (day,)
    assert waited < 10 * LOCK_TIMEOUT_MS / 1000
    assert exists(partition(EVENTS, day))
    assert purge_expired().days == (day,)


def test_the_cluster_page_shows_the_held_days(days, settings, admin_client):
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 50)
    fires(day, 2, status=DeliveryStatus.DELIVERY_FAILED)
    page = admin_client.get(reverse("admin:dsched_schedulerinstance_changelist")).content.decode()
    assert f"{day:%Y-%m-%d} held by 2 dead letter(s)" in page


def test_retention_off_drops_nothing_but_the_leader_still_makes_the_days(days, settings):
    from django_dsched.scheduler.retention_worker import worker_for

    settings.DSCHED_RETENTION_DAYS = None
    day = old_day(days, 400)
    fires(day, 1)
    assert purge_expired() == purge_expired().__class__()
    worker = worker_for(lambda: True, "test", "default", 0.01)
    sql(f"DROP TABLE {partition(OUTBOX, today() + timedelta(days=DAYS_AHEAD))}")
    sql(f"DROP TABLE {partition(EVENTS, today() + timedelta(days=DAYS_AHEAD))}")
    worker._purge()
    assert exists(partition(EVENTS, today() + timedelta(days=DAYS_AHEAD)))
    assert exists(partition(EVENTS, day))


@pytest.fixture
def admin_client(client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_leader_s_fires_are_written_into_the_day_partitions_of_their_slots(db_now):
    from tests.firing.test_refused_rows import run_once

    ScheduleFactory.create_batch(5, start_ts=db_now() - timedelta(seconds=5))
    run_once()
    fired = Event.objects.filter(scheduled_ts__isnull=False)
    assert len(fired) == 5
    for event in fired:
        day = event.scheduled_ts.astimezone(UTC).date()
        assert day_of(event.id) == day
        assert where(EVENTS, event.id) == partition(EVENTS, day)
        assert where(OUTBOX, event.id) == partition(OUTBOX, day)


def test_a_day_is_detached_under_the_parents_lock_then_dropped_apart(days, settings):
    """The parents are locked only to detach the day (renamed …_expired); the detached tables
    are dropped in a second transaction. What a pass that died between them left behind is
    dropped by the next pass."""
    settings.DSCHED_RETENTION_DAYS = 45
    day = old_day(days, 50)
    fires(day, 3)
    # A pass that died after detaching: the tables are no longer partitions.
    for table in (OUTBOX, EVENTS):
        name = partition(table, day)
        sql(f"ALTER TABLE {table} DETACH PARTITION {name}")
        sql(f"ALTER TABLE {name} RENAME TO {name}_expired")
    assert day not in partitions.days()
    assert exists(f"{partition(EVENTS, day)}_expired")
    assert purge_expired().days == ()
    assert not exists(f"{partition(EVENTS, day)}_expired")
    assert not exists(f"{partition(OUTBOX, day)}_expired")
    # And a whole pass leaves nothing behind.
    later = old_day(days, 52)
    fires(later, 2)
    assert purge_expired().days == (later,)
    leftovers = sql("SELECT relname FROM pg_class WHERE relname LIKE %s", ["%\\_expired"])
    assert leftovers == []


def test_the_fire_path_skips_a_slot_another_writer_took_with_another_id(db_now):
    """ON CONFLICT DO NOTHING covers every unique index of the partition: a slot already
    taken by an event of another id (a hand-written one) is skipped, as a slot that fired,
    and the schedule goes on; it is never set aside for it."""
    from tests.outbox.test_event_payload import fire_due

    schedule = ScheduleFactory(start_ts=db_now() - timedelta(seconds=1))
    Event.objects.create(
        id=change_id(schedule.start_ts),
        host_id=schedule.host_id,
        aggregate_id=schedule.schedule_id,
        aggregate_version=1,
        event_type="by.hand",
        event_ts=db_now(),
        payload={},
        scheduled_ts=schedule.start_ts,
    )
    fire_due()
    schedule.refresh_from_db()
    assert schedule.state == "ACTIVE" and schedule.active
    assert schedule.next_run_ts > schedule.start_ts
    assert Event.objects.filter(scheduled_ts=schedule.start_ts).count() == 1
    assert not OutboxMessage.objects.filter(aggregate_id=schedule.schedule_id).exists()


# -- the exactly-once index of partitions made elsewhere ----------------------------------------


@pytest.fixture
def by_hand() -> Iterator[Callable[..., str]]:
    """``by_hand(name, first_day, days=1)`` attaches a partition of event_store_t made by
    hand (or by another tool): it gets the parent's indexes as it is attached, not the
    exactly-once one, which is no index of the parent. Dropped after the test; the default
    partition's exactly-once index is made again if the test dropped it."""
    made: list[str] = []

    def attach(name: str, first: date, days: int = 1) -> str:
        low, high = partitions.bound(first), partitions.bound(first + timedelta(days=days))
        sql(f"CREATE TABLE {name} (LIKE {EVENTS} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        made.append(name)
        sql(f"ALTER TABLE {EVENTS} ATTACH PARTITION {name} FOR VALUES FROM ('{low}') TO ('{high}')")
        return name

    yield attach
    for name in made:
        sql(f"DROP TABLE IF EXISTS {name}")
    sql(
        "CREATE UNIQUE INDEX IF NOT EXISTS dsched_event_one_per_slot_default"
        f" ON {EVENTS}_default (aggregate_id, scheduled_ts) WHERE scheduled_ts IS NOT NULL"
    )


def unguarded() -> dict[str, str]:
    """What the system check reports (``check --database``): partition named → hint."""
    found = {}
    for error in check_history_partitions(databases=["default"]):
        assert error.id == "dsched.W040"
        found[error.msg.split()[2]] = error.hint
    return found


def test_a_partition_without_the_exactly_once_index_is_reported_then_indexed(by_hand):
    """A day attached by hand (named as pg_partman would) and a default partition that lost
    its index: the system check names both, with the statement that mends each; the next
    make_ahead makes their indexes, after which the day refuses a second event for a slot.
    A partition that holds no single day is reported, and left to whoever made it."""
    assert unguarded() == {}
    day = today() - timedelta(days=30)
    by_hand("event_store_t_p_by_hand", day)
    by_hand("event_store_t_two_days", day - timedelta(days=3), days=2)
    sql("DROP INDEX dsched_event_one_per_slot_default")

    hints = unguarded()
    assert set(hints) == {
        "event_store_t_p_by_hand",
        "event_store_t_default",
        "event_store_t_two_days",
    }
    assert (
        f"CREATE UNIQUE INDEX dsched_event_one_per_slot_{day:%Y%m%d} ON event_store_t_p_by_hand"
        " (aggregate_id, scheduled_ts) WHERE scheduled_ts IS NOT NULL;"
        in hints["event_store_t_p_by_hand"]
    )
    assert "purge_history" in hints["event_store_t_p_by_hand"]
    assert (
        "CREATE UNIQUE INDEX dsched_event_one_per_slot_default ON event_store_t_default"
        " (aggregate_id, scheduled_ts) WHERE scheduled_ts IS NOT NULL;"
        in hints["event_store_t_default"]
    )
    assert (
        "CREATE UNIQUE INDEX ON event_store_t_two_days (aggregate_id, scheduled_ts)"
        " WHERE scheduled_ts IS NOT NULL;" in hints["event_store_t_two_days"]
    )

    made = make_ahead()
    assert (made.made, made.index_skipped, made.index_failed) == ((), (), ())
    assert set(made.indexed) == {"event_store_t_p_by_hand", "event_store_t_default"}
    assert set(unguarded()) == {"event_store_t_two_days"}
    assert make_ahead() == partitions.Made()  # nothing left to mend

    [id_] = fires(day, 1)
    assert where(EVENTS, id_) == "event_store_t_p_by_hand"
    with (
        pytest.raises(IntegrityError, match=f"dsched_event_one_per_slot_{day:%Y%m%d}"),
        transaction.atomic(),
    ):
        second_event(Event.objects.get(pk=id_))


def test_an_index_over_every_row_guards_and_one_over_fewer_rows_does_not(by_hand):
    """A unique (aggregate_id, scheduled_ts) index made by hand over every row guards a day
    as the package's own does (over the rows with a slot); one whose predicate leaves out
    some fires does not: the check reports that day."""
    day = today() - timedelta(days=40)
    whole = by_hand("event_store_t_p_whole", day)
    sql(f"CREATE UNIQUE INDEX ON {whole} (aggregate_id, scheduled_ts)")
    partial = by_hand("event_store_t_p_fewer", day - timedelta(days=1))
    sql(
        f"CREATE UNIQUE INDEX ON {partial} (aggregate_id, scheduled_ts)"
        " WHERE scheduled_ts IS NOT NULL AND aggregate_type = 'Schedule'"
    )
    assert set(unguarded()) == {"event_store_t_p_fewer"}


def test_the_exactly_once_index_holds_fires_only_and_serves_the_slot_probe():
    """The package's exactly-once indexes leave out the rows without a slot (a change's
    event: creates and edits write no entry), and still serve the fire path's probe for a
    slot (``aggregate_id = ? AND scheduled_ts = ?`` implies the predicate)."""
    predicates = {
        name: predicate
        for name, predicate in sql(
            "SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index"
            " WHERE indexrelid::regclass::text LIKE 'dsched_event_one_per_slot_%%'"
        )
    }
    assert f"dsched_event_one_per_slot_{today():%Y%m%d}" in predicates
    assert "dsched_event_one_per_slot_default" in predicates
    assert set(predicates.values()) == {"(scheduled_ts IS NOT NULL)"}

    with transaction.atomic():  # without the other index on aggregate_id, rolled back
        sql("DROP INDEX dsched_event_version_idx")
        sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in sql(
                "EXPLAIN SELECT FROM event_store_t e"
                " WHERE e.aggregate_id = %s AND e.scheduled_ts = %s",
                [uuid.uuid4(), datetime.now(UTC)],
            )
        )
        transaction.set_rollback(True)
    assert f"dsched_event_one_per_slot_{today():%Y%m%d}" in plan, plan


def test_a_partition_whose_index_cannot_be_made_is_logged_and_the_others_are_indexed(
    by_hand, caplog
):
    """Two events of one slot in a day made by hand (nothing refused the second): the index
    cannot be made there; the pass logs an error naming the partition and indexes the other
    days; the check goes on reporting it."""
    twice = today() - timedelta(days=31)
    by_hand("event_store_t_p_twice", twice)
    by_hand("event_store_t_p_once", twice - timedelta(days=1))
    [id_] = fires(twice, 1)
    second_event(Event.objects.get(pk=id_))  # not refused: no index

    with caplog.at_level(logging.ERROR, logger="django_dsched.history"):
        made = make_ahead()
    assert made.index_failed == ("event_store_t_p_twice",)
    assert made.indexed == ("event_store_t_p_once",)
    [logged] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "event_store_t_p_twice" in logged.getMessage()
    assert "could not be made" in logged.getMessage()
    assert set(unguarded()) == {"event_store_t_p_twice"}
    err = StringIO()
    call_command("purge_history", stderr=err)
    assert (
        "Could not make the unique (aggregate_id, scheduled_ts) index of event_store_t_p_twice"
        in err.getvalue()
    )


def test_indexing_a_partition_waits_for_its_lock_no_longer_than_the_timeout(by_hand):
    """A write in progress in the day holds it: the pass gives up after LOCK_TIMEOUT_MS and
    the next one makes the index."""
    day = today() - timedelta(days=30)
    by_hand("event_store_t_p_busy", day)
    with other_session() as other, other.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("LOCK TABLE event_store_t_p_busy IN ROW EXCLUSIVE MODE")  # a writer
        started = time.monotonic()
        made = make_ahead()
        waited = time.monotonic() - started
        cursor.execute("ROLLBACK")
    assert (made.indexed, made.index_skipped) == ((), ("event_store_t_p_busy",))
    assert waited < 10 * LOCK_TIMEOUT_MS / 1000
    assert make_ahead().indexed == ("event_store_t_p_busy",)
