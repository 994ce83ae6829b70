"""Bulk create and cancel: any mix of kinds, all or nothing, per-item errors."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.changes import audit
from django_dsched.enums import ScheduleKind, ScheduleState
from django_dsched.exceptions import BulkValidationError, ValidationError
from django_dsched.models import Event, Schedule
from tests.helpers import lock_waiter, other_session, sql, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "mail", "event_type": "reminder.send"}
AT = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_mix_of_kinds_in_one_call_in_order_with_their_events():
    specs = [
        api.Once(delay=timedelta(minutes=5), data={"n": 0}, **COMMON),
        api.Once(at=AT, key="at-once", **COMMON),
        api.Interval(name="every-5", every=5, unit="MINUTES", **COMMON),
        api.Cron(name="nightly", cron="0 2 * * *", time_zone="Europe/Brussels", **COMMON),
        api.Once(delay=timedelta(minutes=5), jitter_seconds=10, **COMMON),
    ]
    created = api.bulk_create(specs)
    assert [s.schedule_kind for s in created] == [
        ScheduleKind.ONCE,
        ScheduleKind.ONCE,
        ScheduleKind.INTERVAL,
        ScheduleKind.CRON,
        ScheduleKind.ONCE,
    ]
    for schedule in created:
        stored = Schedule.objects.get(pk=schedule.pk)
        assert (stored.start_ts, stored.next_run_ts, stored.next_slot_ts) == (
            schedule.start_ts,
            schedule.next_run_ts,
            schedule.next_slot_ts,
        )
        assert stored.created_ts == schedule.created_ts == schedule.updated_ts
    assert created[1].start_ts == AT and created[1].schedule_name == "at-once"
    assert created[0].event_data == {"n": 0}
    assert Event.objects.filter(event_type="dsched.schedule.created").count() == 5


@pytest.mark.usefixtures("known_unlimited")
def test_a_thousand_one_shots_take_one_statement():
    specs = [api.Once(delay=timedelta(hours=1), data={"n": n}, **COMMON) for n in range(1000)]
    with CaptureQueriesContext(connections["default"]) as queries:
        created = api.bulk_create(specs)
    # BEGIN, the INSERT of the schedules and their events, COMMIT.
    assert [q["sql"].split()[0] for q in queries] == ["BEGIN", "WITH", "COMMIT"]
    assert len(created) == Schedule.objects.count() == Event.objects.count() == 1000


def test_times_read_back_are_the_orms_values_in_the_orms_time_zone():
    """The bulk statement's results come in binary through its own timestamptz loader:
    each value, and its tzinfo, as Django's own loader gives it."""
    specs = [api.Once(delay=timedelta(minutes=n), data={"n": n}, **COMMON) for n in range(3)]
    created = api.bulk_create([*specs, api.Once(at=AT, **COMMON)])
    for schedule in created:
        stored = Schedule.objects.get(pk=schedule.pk)
        for name in ("start_ts", "next_run_ts", "next_slot_ts", "created_ts", "updated_ts"):
            mine, orms = getattr(schedule, name), getattr(stored, name)
            assert (mine, mine.tzinfo) == (orms, orms.tzinfo), name
        assert schedule.bucket_key == stored.bucket_key


def test_event_data_is_stored_as_given_whether_sent_as_its_checked_text_or_encoded():
    """Event data accepted by its one compact encoding goes to the database as that text;
    data shared by several items, or that needed the full check, is encoded again: every
    stored value (and its created event's copy) is the value given."""
    shared = {"same": ["object", 1, 2.5, None, True]}
    datas: list[Any] = [
        {"n": 1, "text": "é ☃", "nested": {"a": [1, {"b": []}]}},
        {"emoji": "\U0001f600"},  # written as surrogate escapes: the full check
        shared,
        shared,
        {"quote": 'a "b" \\ c', "big": 10**30, "neg": -0.0},
        {},
    ]
    created = api.bulk_create(
        [api.Once(delay=timedelta(minutes=1), data=data, **COMMON) for data in datas]
    )
    for schedule, data in zip(created, datas, strict=True):
        stored = Schedule.objects.get(pk=schedule.pk).event_data
        event = Event.objects.get(aggregate_id=schedule.pk, event_type="dsched.schedule.created")
        expected = json.loads(json.dumps(data))
        assert stored == expected
        assert event.payload["definition"]["event_data"] == expected


def test_bad_items_are_named_by_index_and_field_and_nothing_is_written():
    api.create_interval("taken", every=1, **COMMON)
    specs = [
        api.Once(delay=timedelta(minutes=1), **COMMON),
        api.Interval(every=0, **COMMON),
        api.Once(at=datetime(2030, 1, 1), **COMMON),
        api.Cron(cron="61 * * * *", **COMMON),
        api.Once(delay=timedelta(minutes=1), topic="two words", event_type="x"),
        api.Once(delay=timedelta(minutes=1), key="dup", **COMMON),
        api.Once(delay=timedelta(minutes=1), key="dup", **COMMON),
        api.Once(**COMMON),
        "not a spec",
    ]
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_create(specs)
    found = {(index, field) for index, field, _message in excinfo.value.item_errors}
    assert found == {
        (1, "every"),
        (2, "at"),
        (3, "cron"),
        (4, "topic"),
        (6, "key"),
        (7, "at"),  # a one-shot without its time: at= (or delay=) is at fault
        (8, "__all__"),
    }
    messages = {(i, f): m for i, f, m in excinfo.value.item_errors}
    assert "greater than or equal to 1" in messages[(1, "every")]
    assert messages[(6, "key")] == "Item 5 has the same key."
    assert isinstance(excinfo.value, ValidationError)
    assert Schedule.objects.count() == 1  # only "taken"


def test_an_error_found_after_chunks_were_sent_writes_nothing(monkeypatch):
    """Chunks are sent while later ones are validated: an invalid item (or a repeated key)
    in a later chunk stops the sending, every error is still reported, and what was sent
    is undone; the caller's transaction stays usable."""
    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    events = Event.objects.count()
    specs = [api.Once(delay=timedelta(minutes=1), key=f"k{n}", **COMMON) for n in range(5)]
    specs += [
        api.Interval(every=0, **COMMON),
        api.Once(delay=timedelta(minutes=1), key="k1", **COMMON),
        api.Cron(cron="61 * * * *", **COMMON),
    ]
    with transaction.atomic():
        with (
            CaptureQueriesContext(connections["default"]) as queries,
            pytest.raises(BulkValidationError) as excinfo,
        ):
            api.bulk_create(specs)
        assert [q["sql"].split()[0] for q in queries].count("WITH") == 2  # two chunks sent
        assert {(i, f) for i, f, _m in excinfo.value.item_errors} == {
            (5, "every"),
            (6, "key"),
            (7, "cron"),
        }
        assert Schedule.objects.count() == 0 and Event.objects.count() == events
        assert api.create_once("after", delay=timedelta(minutes=1), **COMMON).pk
    assert list(Schedule.objects.values_list("schedule_name", flat=True)) == ["after"]


def test_without_pipeline_mode_the_chunks_run_one_by_one(monkeypatch):
    """A libpq older than 14 has no pipeline mode: each chunk's statement then runs as it
    is sent, with the same result (and errors)."""
    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    monkeypatch.setattr("psycopg.Pipeline.is_supported", classmethod(lambda cls: False))
    api.create_once("old", key="known", delay=timedelta(hours=1), **COMMON)
    specs: list[Any] = [api.Once(delay=timedelta(minutes=n), **COMMON) for n in range(5)]
    specs.append(api.Once(delay=timedelta(minutes=1), key="known", **COMMON))
    created = api.bulk_create(specs)
    assert created[5].schedule_name == "old"
    assert Schedule.objects.count() == 6
    with pytest.raises(BulkValidationError):
        api.bulk_create([*specs[:5], api.Interval(every=0, **COMMON)])
    assert Schedule.objects.count() == 6


def test_a_database_error_in_a_sent_chunk_undoes_the_call(monkeypatch):
    """A statement the server refuses (here a CHECK constraint Python knows nothing of)
    while later chunks are in flight: the call raises Django's IntegrityError, nothing is
    written, and the caller's transaction goes on."""
    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    specs = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(4)]
    specs += [api.Once(delay=timedelta(minutes=1), topic="forbidden", event_type="x")]
    specs += [api.Once(delay=timedelta(minutes=1), **COMMON)]
    with transaction.atomic():
        sql(
            "ALTER TABLE schedule_t ADD CONSTRAINT test_not_forbidden"
            " CHECK (event_topic <> 'forbidden')"
        )
        with pytest.raises(IntegrityError, match="test_not_forbidden"):
            api.bulk_create(specs)
        assert Schedule.objects.count() == 0
        assert api.bulk_create(specs[:2])  # the transaction is usable
        transaction.set_rollback(True)  # the constraint goes too
    assert Schedule.objects.count() == 0 and Event.objects.count() == 0


def test_chunks_sent_while_validating_read_the_clock_and_keep_their_order(monkeypatch):
    """An item needing the database's clock in a later chunk reads it while earlier chunks
    are in flight; every item comes back in order, created once, with its event."""
    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 3)
    api.create_once("old", key="known", delay=timedelta(hours=1), **COMMON)
    specs: list[Any] = [
        api.Once(delay=timedelta(minutes=n), data={"n": n}, **COMMON) for n in range(4)
    ]
    specs += [
        api.Interval(name="every-2", every=2, **COMMON),  # no start: the clock
        api.Once(delay=timedelta(minutes=1), key="known", **COMMON),
        api.Cron(name="nightly", cron="0 2 * * *", **COMMON),
    ]
    created = api.bulk_create(specs)
    assert [s.event_data.get("n") for s in created[:4]] == [0, 1, 2, 3]
    assert created[4].schedule_name == "every-2" and created[4].start_ts is not None
    assert created[5].schedule_name == "old"
    assert created[6].schedule_name == "nightly"
    assert Schedule.objects.count() == 7
    assert Event.objects.filter(event_type="dsched.schedule.created").count() == 7


def test_a_name_taken_in_the_database_undoes_the_whole_call():
    api.create_interval("taken", every=1, **COMMON)
    specs = [
        api.Once(delay=timedelta(minutes=1), **COMMON),
        api.Interval(name="taken", every=2, **COMMON),
    ]
    with transaction.atomic():
        with pytest.raises(BulkValidationError) as excinfo:
            api.bulk_create(specs)
        assert [(i, f) for i, f, _m in excinfo.value.item_errors] == [(1, "name")]
        # The caller's transaction goes on; the call left nothing.
        assert Schedule.objects.count() == 1
    assert Event.objects.count() == 1


def test_keys_that_exist_give_the_existing_schedules():
    existing = api.create_once(key="k1", delay=timedelta(minutes=1), **COMMON)
    created = api.bulk_create(
        [
            api.Once(key="k1", delay=timedelta(hours=5), **COMMON),
            api.Once(key="k2", delay=timedelta(minutes=1), **COMMON),
        ]
    )
    assert created[0].schedule_id == existing.schedule_id
    assert created[1].idempotency_key == "k2"
    assert Schedule.objects.count() == 2


def test_an_oversize_call_is_refused_before_anything_is_written(settings):
    settings.DSCHED_BULK_MAX_ITEMS = 3

    def endless():
        n = 0
        while True:
            n += 1
            yield api.Once(delay=timedelta(minutes=1), **COMMON)
            assert n < 10, "read past the limit"

    with CaptureQueriesContext(connections["default"]) as queries:
        with pytest.raises(ValidationError, match="at most 3"):
            api.bulk_create(endless())
        with pytest.raises(ValidationError, match="at most 3"):
            api.bulk_cancel(["a", "b", "c", "d"])
    assert len(queries) == 0
    assert api.bulk_create([api.Once(delay=timedelta(minutes=1), **COMMON)] * 0) == []


def test_bulk_cancel_by_ref_and_key_all_or_nothing():
    created = api.bulk_create(
        [api.Once(key=f"k{n}", delay=timedelta(hours=1), **COMMON) for n in range(5)]
    )
    named = api.create_interval("named", every=1, **COMMON)
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_cancel([created[0], "nobody"], keys=["k1", "missing", "k1"])
    assert [(i, f) for i, f, _m in excinfo.value.item_errors] == [(4, "key")]
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_cancel([created[0], "nobody"], keys=["k1", "missing"])
    assert sorted((i, f) for i, f, _m in excinfo.value.item_errors) == [(1, "ref"), (3, "key")]
    assert not Schedule.objects.filter(state=ScheduleState.CANCELLED).exists()

    count = api.bulk_cancel(
        [created[0], str(created[1].pk), "named"], keys=["k2", "k3"], actor="ops"
    )
    assert (count.changed, count.skipped) == (5, 0)
    assert api.bulk_cancel([created[0]], keys=["k4"]).changed == 1
    assert api.bulk_cancel([created[0]]).skipped == 1
    named.refresh_from_db()
    assert named.state == ScheduleState.CANCELLED
    cancelled = Event.objects.filter(event_type="dsched.schedule.cancelled")
    assert cancelled.count() == 6
    assert {e.payload["actor"] for e in cancelled} == {"ops", "system"}
    for event in cancelled:  # the shape cancels.cancel gives (audit.event_for)
        stored = Schedule.objects.get(pk=event.aggregate_id)
        assert event.payload["changes"] == {"state": ["ACTIVE", "CANCELLED"]}
        assert datetime.fromisoformat(event.payload["at"]) == event.event_ts == stored.updated_ts
        assert event.aggregate_version == stored.aggregate_version == 2
        assert event.metadata == {
            "actor": event.payload["actor"],
            "schedule_name": stored.schedule_name,
            "origin": stored.origin,
        }


def test_one_string_for_the_references_or_the_keys_is_refused_not_read_letter_by_letter():
    """``bulk_cancel("k")`` read "k" as the one-letter reference "k", and cancelled it."""
    api.create_once("k", key="k", delay=timedelta(hours=1), **COMMON)
    for call in (lambda: api.bulk_cancel("k"), lambda: api.bulk_cancel(keys="k")):
        with pytest.raises(ValidationError, match="not as one string"):
            call()
    assert Schedule.objects.get().state == ScheduleState.ACTIVE


def test_one_schedule_named_by_two_references_is_given_twice():
    """An id and a name, or an id and a key, of one schedule: before, it was cancelled once
    and counted once, yet the REST API reported it as two cancelled items."""
    keyed = api.create_once("keyed", key="k", delay=timedelta(hours=1), **COMMON)
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_cancel([keyed.pk, "keyed"])
    assert excinfo.value.item_errors == [(1, "ref", "Given twice in this call.")]
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_cancel(["keyed"], keys=["k"])
    assert excinfo.value.item_errors == [(1, "key", "Given twice in this call.")]
    keyed.refresh_from_db()
    assert keyed.state == ScheduleState.ACTIVE
    assert not Event.objects.filter(event_type="dsched.schedule.cancelled").exists()


def test_a_schedule_deleted_between_the_lookup_and_the_cancel_undoes_the_call():
    """The Python API's cancel fetches only counts: a schedule gone when the cancel locks it
    is still named, and the whole call undone."""
    kept = api.create_once("kept", delay=timedelta(hours=1), **COMMON)
    doomed = api.create_once("doomed", key="d", delay=timedelta(hours=1), **COMMON)
    done: list[bool] = []

    def delete_after_the_lookup(execute: Callable[..., Any], sql_: str, *args: Any) -> Any:
        result = execute(sql_, *args)
        if not done and "schedule_t" in sql_:
            done.append(True)
            with connections["default"].cursor() as cursor:
                cursor.execute("DELETE FROM schedule_t WHERE schedule_id = %s", [doomed.pk])
        return result

    events = Event.objects.count()
    with (
        connections["default"].execute_wrapper(delete_after_the_lookup),
        pytest.raises(BulkValidationError) as excinfo,
    ):
        api.bulk_cancel([kept.pk], keys=["d"])
    assert excinfo.value.item_errors == [(1, "key", "No such schedule.")]
    assert Schedule.objects.get(pk=kept.pk).state == ScheduleState.ACTIVE
    assert Event.objects.count() == events
    assert api.bulk_cancel([kept.pk]).changed == 1  # and the counts path counts


def _instance(name: str, **fields: Any) -> Schedule:
    return Schedule(
        schedule_name=name,
        schedule_kind=ScheduleKind.INTERVAL,
        frequency_time=1,
        frequency_unit="MINUTES",
        event_topic="mail",
        event_type="reminder.send",
        **fields,
    )


def test_two_instances_with_one_id_are_named_not_an_integrity_error():
    first = _instance("a")
    second = _instance("b", schedule_id=first.schedule_id)
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_create([first, _instance("c"), second])
    assert excinfo.value.item_errors == [(2, "schedule_id", "Item 0 has the same id.")]
    assert not Schedule.objects.exists()


def test_an_instance_with_a_taken_id_is_named_on_its_id_not_its_name():
    taken = api.create_interval("taken", every=1, **COMMON)
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_create([_instance("a"), _instance("b", schedule_id=taken.schedule_id)])
    assert excinfo.value.item_errors == [
        (1, "schedule_id", "A schedule with this id already exists.")
    ]
    assert Schedule.objects.count() == 1


@pytest.mark.parametrize(
    "specs",
    [
        # Every field but the name and data the same: most of the definition is shared.
        [api.Once(delay=timedelta(minutes=5), data={"n": n}, **COMMON) for n in range(3)],
        [api.Once(at=AT, data={"same": 1}, priority=3, **COMMON) for _n in range(3)],
        [
            api.Interval(every=n + 1, start=AT, time_zone="Europe/Brussels", **COMMON)
            for n in range(3)
        ],
    ],
)
def test_each_created_event_records_its_schedules_whole_definition(specs):
    created = api.bulk_create(specs)
    for schedule in created:
        stored = Schedule.objects.get(pk=schedule.pk)
        event = Event.objects.get(aggregate_id=schedule.pk, event_type="dsched.schedule.created")
        recorded, expected = event.payload["definition"], audit.definition(stored)
        for name in ("start_ts", "end_ts"):  # PostgreSQL drops trailing zeros of microseconds
            for values in (recorded, expected):
                if values[name] is not None:
                    values[name] = datetime.fromisoformat(values[name])
        assert recorded == expected


def test_an_item_shaped_like_a_valid_one_still_gets_every_error_of_its_own():
    # Items 1.. have the shape (every field but id, name, key and data) of item 0, which
    # passed: validated quickly, yet each gets exactly the errors it gets alone.
    bad = [
        api.Once(delay=timedelta(minutes=5), data=[1], **COMMON),
        api.Once(delay=timedelta(minutes=5), name="", **COMMON),
        api.Once(delay=timedelta(minutes=5), key="", **COMMON),
        api.Once(delay=timedelta(minutes=5), name="x" * 1000, data={"a": "\x00"}, **COMMON),
        api.Once(delay=timedelta(minutes=5), misfire_policy="BOGUS", **COMMON),
    ]
    alone = []
    for spec in bad:
        with pytest.raises(BulkValidationError) as excinfo:
            api.bulk_create([spec])
        alone.append(excinfo.value.item_errors)
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_create([api.Once(delay=timedelta(minutes=5), **COMMON), *bad])
    together = excinfo.value.item_errors
    for n, errors in enumerate(alone, start=1):
        assert errors, bad[n - 1]
        assert [(index + n, field, message) for index, field, message in errors] == [
            error for error in together if error[0] == n
        ]
    assert not Schedule.objects.exists()


# -- bulk_cancel's plans do not depend on the statistics ----------------------------------


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.parametrize("stats", ["analysed while uncommitted", "fresh"])
def test_bulk_cancel_probes_an_index_per_item_whatever_the_statistics(stats):
    """Each of bulk_cancel's statements reads ``schedule_t`` by index probes, at most one
    row per item, on a table filled moments ago: here its statistics read it as empty (an
    ANALYZE from another session while the rows were uncommitted, as autovacuum does during
    a long bulk transaction), or are fresh and count 3,000 rows. The plans before this
    joined the items to the whole table (a hash join over a seq scan or a full index scan:
    every row of the table read for each call), and with these statistics could turn
    quadratic (the benchmark's bulk_cancel runs that collapsed from ~25,000/s to ~800/s)."""
    total, cancelled = 3_000, 300
    plans: list[dict[str, Any]] = []

    def explain_first(
        execute: Callable[..., Any], sql_text: str, params: Any, many: bool, context: Any
    ) -> Any:
        if not sql_text.lstrip().upper().startswith(("SELECT", "WITH")):
            return execute(sql_text, params, many, context)  # the call's savepoint
        cursor = context["cursor"].cursor
        cursor.execute("SAVEPOINT plan_check")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql_text, params)
        (plan,) = cursor.fetchone()
        cursor.execute("ROLLBACK TO SAVEPOINT plan_check")
        plans.append(json.loads(plan) if isinstance(plan, str) else plan)
        return execute(sql_text, params, many, context)

    with transaction.atomic():
        created = api.bulk_create(
            [api.Once(delay=timedelta(hours=1), data={"n": n}, **COMMON) for n in range(total)]
        )
        if stats == "fresh":
            sql("ANALYZE schedule_t")
        else:
            with other_session() as other:
                sql("ANALYZE schedule_t", using=other)
            assert sql("SELECT reltuples FROM pg_class WHERE relname = 'schedule_t'") == [(0,)]
        refs: list[Any] = [s.schedule_id for s in created[: cancelled - 2]]
        refs.append(created[cancelled - 2].schedule_name)
        with connections["default"].execute_wrapper(explain_first):
            result = api.bulk_cancel(refs, keys=[])
    assert result.changed == cancelled - 1
    assert len(plans) == 2  # resolve, then lock + cancel + audit
    for plan in plans:
        scans = [
            node
            for node in _plan_nodes(plan[0]["Plan"])
            if node.get("Relation Name") == "schedule_t" and "Scan" in node["Node Type"]
        ]
        assert scans
        for scan in scans:
            shown = {k: v for k, v in scan.items() if k != "Plans"}
            # Driven by an index (a bitmap of one, for a probe or an array of ids: either
            # way the rows it names), never a seq scan, ...
            assert scan["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), shown
            # ... and reading at most one row per item, rows it threw away included.
            read = (
                scan["Actual Rows"]
                + scan.get("Rows Removed by Filter", 0)
                + scan.get("Rows Removed by Index Recheck", 0)
            )
            assert read * scan["Actual Loops"] <= cancelled, shown
        # Nothing is rescanned per item but the index probes: no quadratic join.
        for node in _plan_nodes(plan[0]["Plan"]):
            if node.get("Relation Name") != "schedule_t" and node["Node Type"] != "Result":
                assert node["Actual Loops"] <= 1 or node["Node Type"] in (
                    "Index Scan",
                    "Index Only Scan",
                    "Bitmap Index Scan",
                    "LockRows",
                    "Subquery Scan",
                    "Limit",
                ), node["Node Type"]
    assert Schedule.objects.filter(state=ScheduleState.CANCELLED).count() == cancelled - 1
    assert Event.objects.filter(event_type="dsched.schedule.cancelled").count() == cancelled - 1


@pytest.mark.parametrize(
    ("before", "after", "cancelled"),
    [("ACTIVE", "COMPLETED", False), ("COMPLETED", "ACTIVE", True)],
)
def test_bulk_cancel_waits_for_a_row_in_flight_and_acts_on_what_it_became(before, after, cancelled):
    """A row locked by another transaction (a fire in flight, an edit): bulk_cancel waits,
    then decides on the row as that transaction left it, and its audit event records that
    state and the version after it: completed meanwhile, it is skipped with no event;
    revived meanwhile (its statement's snapshot still saw it completed), it is cancelled."""
    busy, other_one = api.bulk_create(
        [api.Once(delay=timedelta(hours=1), **COMMON), api.Once(delay=timedelta(hours=1), **COMMON)]
    )
    Schedule.objects.filter(pk=busy.pk).update(state=before, active=before == "ACTIVE")
    outcome: list[Any] = []

    def cancel() -> None:
        try:
            outcome.append(api.bulk_cancel([busy.pk, other_one.pk]))
        except BaseException as exc:  # reported below
            outcome.append(exc)
        finally:
            connections.close_all()

    with other_session() as other:
        sql("BEGIN", using=other)
        sql(
            "UPDATE schedule_t SET state = %s, active = %s,"
            " aggregate_version = aggregate_version + 1 WHERE schedule_id = %s",
            [after, after == "ACTIVE", busy.pk],
            using=other,
        )
        thread = threading.Thread(target=cancel)
        thread.start()
        lock_waiter("%FOR UPDATE%", what="bulk_cancel waiting for the row lock")
        sql("COMMIT", using=other)
        thread.join(timeout=30)
    (result,) = outcome
    assert not isinstance(result, BaseException), result
    assert (result.changed, result.skipped) == ((2, 0) if cancelled else (1, 1))
    stored = Schedule.objects.get(pk=busy.pk)
    assert stored.state == ("CANCELLED" if cancelled else after)
    events = Event.objects.filter(aggregate_id=busy.pk, event_type="dsched.schedule.cancelled")
    if cancelled:
        (event,) = events
        assert event.aggregate_version == stored.aggregate_version == busy.aggregate_version + 2
        assert event.payload["changes"] == {"state": [after, "CANCELLED"]}
        assert event.event_ts == stored.updated_ts
    else:
        assert not events.exists()
    assert Schedule.objects.get(pk=other_one.pk).state == "CANCELLED"


def _refused_by_the_database_in_the_first_chunk(
    monkeypatch: pytest.MonkeyPatch, *, pipeline: bool = True
) -> None:
    """Chunks of 2; item 0 passes Python's checks but breaks a CHECK constraint (the last
    line: max_fires 0); item 2's validation waits until the server has answered chunk 0's
    statement, so its error is already on the wire when the next chunk is sent."""
    import select

    from django_dsched.changes.creates import Preparer

    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    prepare = Preparer.prepare
    calls = itertools.count()

    def prepare_and_break(self: Preparer, spec: Any) -> Any:
        n = next(calls)
        if n == 2 and pipeline:
            socket = connections["default"].connection.pgconn.socket
            wait_for(lambda: select.select([socket], [], [], 0)[0], what="chunk 0's answer")
        item = prepare(self, spec)
        if n == 0:
            item.schedule.max_fires = 0
        return item

    monkeypatch.setattr(Preparer, "prepare", prepare_and_break)
    if not pipeline:  # a libpq older than 14: each chunk runs (and fails) as it is sent
        monkeypatch.setattr("psycopg.Pipeline.is_supported", classmethod(lambda cls: False))


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_constraint_broken_in_an_early_chunk_is_its_validation_error(monkeypatch, pipeline):
    """The database refusing an item of a chunk sent while later ones are validated gives
    the same ValidationError as a refused item in the last chunk (its constraint's
    message), whenever the refusal reaches the client; nothing is written."""
    _refused_by_the_database_in_the_first_chunk(monkeypatch, pipeline=pipeline)
    specs = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(6)]
    with transaction.atomic():
        with pytest.raises(ValidationError) as excinfo:
            api.bulk_create(specs)
        assert not isinstance(excinfo.value, BulkValidationError)
        assert "max" in str(excinfo.value).lower(), excinfo.value
        assert Schedule.objects.count() == 0
        assert api.create_once("after", delay=timedelta(minutes=1), **COMMON).pk
    assert Schedule.objects.count() == 1


@pytest.mark.parametrize("pipeline", [True, False])
def test_an_invalid_item_is_reported_even_after_a_chunk_the_database_refused(monkeypatch, pipeline):
    """As when validation came first: every invalid item is reported (BulkValidationError),
    not the database's refusal of an earlier chunk that validation alone would not see."""
    _refused_by_the_database_in_the_first_chunk(monkeypatch, pipeline=pipeline)
    specs: list[Any] = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(6)]
    specs.append(api.Interval(every=0, **COMMON))
    with pytest.raises(BulkValidationError) as excinfo:
        api.bulk_create(specs)
    assert [(i, f) for i, f, _m in excinfo.value.item_errors] == [(6, "every")]
    assert Schedule.objects.count() == 0
    assert connections["default"].connection.pgconn.transaction_status == 0  # idle


def test_the_cyclic_collector_is_paused_during_a_call_and_restored_on_every_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off while items are validated and chunks are in flight; on again after a success,
    a BulkValidationError or a KeyboardInterrupt with chunks in flight (which also leaves
    the connection out of pipeline mode, its transaction undone); left off when the caller
    had it off."""
    import gc

    from django_dsched.changes.creates import Preparer

    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    prepare = Preparer.prepare
    seen: list[bool] = []
    interrupt_at: list[int] = []

    def watching(self: Preparer, spec: Any) -> Any:
        seen.append(gc.isenabled())
        if interrupt_at and len(seen) == interrupt_at[0]:
            raise KeyboardInterrupt
        return prepare(self, spec)

    monkeypatch.setattr(Preparer, "prepare", watching)
    specs: list[Any] = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(6)]
    assert gc.isenabled()
    assert len(api.bulk_create(specs)) == 6
    assert gc.isenabled() and seen and not any(seen)
    with pytest.raises(BulkValidationError):
        api.bulk_create([*specs[:4], api.Interval(every=0, **COMMON)])
    assert gc.isenabled()
    seen.clear()
    interrupt_at.append(5)  # two chunks sent
    with pytest.raises(KeyboardInterrupt):
        api.bulk_create([api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(6)])
    assert gc.isenabled()
    pgconn = connections["default"].connection.pgconn
    assert (pgconn.pipeline_status, pgconn.transaction_status) == (0, 0)  # off, idle
    assert Schedule.objects.count() == 6
    interrupt_at.clear()
    gc.disable()
    try:
        api.bulk_create([api.Once(delay=timedelta(minutes=1), **COMMON)])
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("clash", ["key", "name"])
def test_a_key_or_name_another_call_commits_while_chunks_are_in_flight(monkeypatch, clash):
    """Another transaction holds a schedule with this key (or name), uncommitted, while
    bulk_create's first chunk, pipelined, waits for it and later chunks go out behind it:
    once it commits, the key gives the existing schedule in its place (the rest created);
    the name undoes the whole call with the name's error, nothing written."""
    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    holding, release = threading.Event(), threading.Event()

    def other_call() -> None:
        try:
            with transaction.atomic():
                api.create_once("held", key="k", delay=timedelta(hours=1), **COMMON)
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_call)
    thread.start()
    assert holding.wait(10)
    clashing = {"key": "k"} if clash == "key" else {"name": "held"}
    specs: list[Any] = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(5)]
    specs.insert(1, api.Once(delay=timedelta(minutes=1), **clashing, **COMMON))

    def release_once_waiting() -> None:
        with other_session() as watcher:
            lock_waiter(
                "%WITH c AS%", what="the first chunk waiting for the held row", using=watcher
            )
        release.set()

    releaser = threading.Thread(target=release_once_waiting)
    releaser.start()
    try:
        if clash == "key":
            created = api.bulk_create(specs)
            assert created[1].schedule_name == "held"
            assert Schedule.objects.count() == 6
            assert Event.objects.filter(event_type="dsched.schedule.created").count() == 6
        else:
            with pytest.raises(BulkValidationError) as excinfo:
                api.bulk_create(specs)
            assert [(i, f) for i, f, _m in excinfo.value.item_errors] == [(1, "name")]
            assert list(Schedule.objects.values_list("schedule_name", flat=True)) == ["held"]
    finally:
        release.set()
        releaser.join(30)
        thread.join(30)


def test_event_data_changed_since_an_earlier_check_is_stored_as_it_is_now():
    """A dict accepted by the one-encoding check (in a single create, or a bulk call that
    failed) and then changed by the caller into data only the full check accepts: a later
    bulk call stores the data as it is then, never the text remembered from before."""
    data: dict[str, Any] = {"msg": "hi"}
    api.create_once("first", data=data, delay=timedelta(minutes=1), **COMMON)
    with pytest.raises(BulkValidationError):
        api.bulk_create(
            [
                api.Once(delay=timedelta(minutes=1), data=data, **COMMON),
                api.Interval(every=0, **COMMON),
            ]
        )
    data["msg"] = "hi \U0001f600"  # written as surrogate escapes: the full check
    created = api.bulk_create([api.Once(delay=timedelta(minutes=1), data=data, **COMMON)])
    assert Schedule.objects.get(pk=created[0].pk).event_data == {"msg": "hi \U0001f600"}


def test_a_create_leaves_no_event_data_text_behind():
    """The text the one-encoding check makes is taken with the validated schedule: the
    process-wide cache holds no caller's data after a single or a bulk create."""
    from django_dsched.changes.constraints import FieldCache

    data = {"user": 42}
    api.bulk_create([api.Once(delay=timedelta(minutes=1), data=data, **COMMON)])
    assert FieldCache.shared()._text is None
    schedule = api.create_once("one", data=data, delay=timedelta(minutes=1), **COMMON)
    assert FieldCache.shared()._text is None
    assert Schedule.objects.get(pk=schedule.pk).event_data == data


def test_a_create_that_fails_validation_leaves_no_event_data_text_behind():
    """An item whose event data passed its check but whose other fields did not: the
    text is dropped all the same (the process-wide cache would keep the caller's data
    alive until the next create)."""
    from django_dsched.changes.constraints import FieldCache

    data = {"user": 42}
    with pytest.raises(BulkValidationError):
        api.bulk_create([api.Once(delay=timedelta(minutes=1), data=data, topic="", event_type="x")])
    assert FieldCache.shared()._text is None
    with pytest.raises(ValidationError):
        api.create_once("one", data=data, delay=timedelta(minutes=1), topic="", event_type="x")
    assert FieldCache.shared()._text is None
    assert not Schedule.objects.exists()


def test_a_session_killed_while_chunks_are_in_flight_writes_nothing_and_the_next_call_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session running bulk_create is terminated while its first chunk waits for a row
    another transaction holds and later chunks are pipelined behind it: the call raises a
    database error (not a hang, not a half result), nothing is written, the collector is
    on again, and the next call on the same thread reconnects and creates."""
    import gc

    from django.db import DatabaseError

    monkeypatch.setattr("django_dsched.changes.bulk.CHUNK", 2)
    holding, release = threading.Event(), threading.Event()

    def other_call() -> None:
        try:
            with transaction.atomic():
                api.create_once("held", delay=timedelta(hours=1), **COMMON)
                holding.set()
                release.wait(30)
                transaction.set_rollback(True)
        finally:
            connections.close_all()

    def kill_once_waiting() -> None:
        try:
            with other_session() as watcher:
                pid = lock_waiter(
                    "%WITH c AS%", what="the first chunk waiting for the held row", using=watcher
                )
                sql("SELECT pg_terminate_backend(%s)", [pid], using=watcher)
        finally:
            release.set()

    holder = threading.Thread(target=other_call)
    holder.start()
    assert holding.wait(10)
    killer = threading.Thread(target=kill_once_waiting)
    killer.start()
    specs: list[Any] = [api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(5)]
    specs.insert(1, api.Once(name="held", delay=timedelta(minutes=1), **COMMON))
    try:
        with pytest.raises(DatabaseError):
            api.bulk_create(specs)
    finally:
        release.set()
        killer.join(30)
        holder.join(30)
    assert gc.isenabled()
    with other_session() as watcher:
        assert sql("SELECT count(*) FROM schedule_t", using=watcher) == [(0,)]
        assert sql("SELECT count(*) FROM event_store_t", using=watcher) == [(0,)]
    created = api.bulk_create([api.Once(delay=timedelta(minutes=1), **COMMON) for _n in range(3)])
    assert Schedule.objects.filter(pk__in=[s.pk for s in created]).count() == 3
