"""Fast creates and state changes: round trips, validation in Python with full_clean()'s
rules and messages, the database's constraints as the last line, one statement for a
schedule and its "created" event."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from django.db.models import CheckConstraint, UniqueConstraint
from django.db.models.expressions import DatabaseDefault
from django.test.utils import CaptureQueriesContext

from django_dsched import api
from django_dsched.changes import audit, constraints, creates, single_insert
from django_dsched.changes.constraints import TWINS, FieldCache, validate_new
from django_dsched.enums import ScheduleKind, ScheduleOrigin, ScheduleState
from django_dsched.exceptions import ValidationError
from django_dsched.models import Event, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "mail", "event_type": "reminder.send"}
AT = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("create", "kwargs"),
    [
        (api.create_once, {"delay": timedelta(minutes=15)}),
        (api.create_once, {"at": AT}),
        (api.create_once, {"delay": timedelta(minutes=15), "jitter_seconds": 30}),
        (api.create_interval, {"every": 5}),
        (api.create_interval, {"every": 5, "start": AT}),
        (api.create_cron, {"cron": "0 2 * * *"}),
        (api.create_once, {"delay": timedelta(minutes=15), "key": "order-42"}),
    ],
)
def test_a_create_takes_at_most_three_round_trips(create, kwargs):
    with CaptureQueriesContext(connection) as queries:
        schedule = create(**COMMON, **kwargs)
    assert len(queries) <= 3, [q["sql"][:80] for q in queries]
    assert Schedule.objects.filter(pk=schedule.pk).exists()
    assert Event.objects.filter(
        aggregate_id=schedule.pk, event_type="dsched.schedule.created"
    ).exists()


@pytest.mark.usefixtures("known_unlimited")
def test_a_delayed_message_is_one_statement():
    with CaptureQueriesContext(connection) as queries:
        api.create_once(delay=timedelta(minutes=15), data={"user": 42}, **COMMON)
    assert len(queries) == 1
    assert "INSERT INTO" in queries[0]["sql"] and "event_store_t" in queries[0]["sql"]


@pytest.mark.usefixtures("known_unlimited")
def test_a_created_schedule_carries_the_bucket_key_the_database_generated():
    with CaptureQueriesContext(connection) as queries:
        schedule = api.create_once(delay=timedelta(minutes=15), **COMMON)
        bulk = api.bulk_create([api.Once(delay=timedelta(minutes=15), **COMMON)])[0]
        key, bulk_key = schedule.bucket_key, bulk.bucket_key
    # Read back by the insert itself: no query to load the generated column.
    assert not [q["sql"] for q in queries if q["sql"].lstrip().startswith("SELECT")]
    stored = dict(Schedule.objects.values_list("pk", "bucket_key"))
    assert (key, bulk_key) == (stored[schedule.pk], stored[bulk.pk])


@pytest.mark.parametrize("verb", ["pause", "resume", "cancel"])
def test_a_state_change_takes_at_most_three_round_trips(verb):
    schedule = api.create_interval("s", every=1, **COMMON)
    if verb == "resume":
        api.pause("s")
    with CaptureQueriesContext(connection) as queries:
        assert getattr(api, verb)("s") is True
    assert len(queries) <= 3, [q["sql"][:80] for q in queries]
    if verb == "cancel":  # lock, cancel and audit in one statement
        assert len(queries) == 1, [q["sql"][:80] for q in queries]
    schedule.refresh_from_db()
    expected = {"pause": "PAUSED", "resume": "ACTIVE", "cancel": "CANCELLED"}[verb]
    assert schedule.state == expected
    newest = Event.objects.filter(aggregate_id=schedule.pk).order_by("-aggregate_version")[0]
    assert newest.aggregate_version == schedule.aggregate_version
    assert newest.payload["changes"]["state"][1] == expected


def test_run_now_takes_at_most_three_round_trips():
    """The schedule, the clock, and one statement for the fire: no savepoint of its own (in
    autocommit, no BEGIN and COMMIT). Run in a transaction, where Django logs a savepoint's
    two statements too."""
    schedule = api.create_interval("now", every=1, unit="HOURS", **COMMON)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        assert api.trigger("now") == 1
    assert len(queries) <= 3, [q["sql"][:80] for q in queries]
    fired = Event.objects.filter(aggregate_id=schedule.pk, scheduled_ts__isnull=False)
    assert fired.count() == 1


def test_a_state_change_of_a_missing_schedule_raises_does_not_exist():
    with pytest.raises(Schedule.DoesNotExist):
        api.cancel("nobody")
    with pytest.raises(Schedule.DoesNotExist):
        api.pause(key="nobody")


def test_a_state_change_read_before_a_fire_is_decided_again_after_it(db_now):
    """Compare-and-set: a row that moved between the read and the write is read again."""
    from django_dsched.changes import pauses

    schedule = api.create_interval("moving", every=1, **COMMON)
    original_write = pauses._write
    calls = []

    def write_after_a_concurrent_change(updates, events, now):
        if not calls:  # the first write finds the row changed by someone else
            Schedule.objects.filter(pk=schedule.pk).update(
                aggregate_version=schedule.aggregate_version + 5
            )
        calls.append(1)
        return original_write(updates, events, now)

    pauses._write = write_after_a_concurrent_change
    try:
        assert api.pause("moving", reason="r") is True
    finally:
        pauses._write = original_write
    assert len(calls) == 2
    schedule.refresh_from_db()
    assert schedule.state == ScheduleState.PAUSED
    assert schedule.aggregate_version == 7  # created 1, moved to 6, paused 7
    assert Event.objects.filter(aggregate_id=schedule.pk, aggregate_version=7).exists()


def test_the_created_event_records_the_definition_the_database_computed():
    schedule = api.create_once(delay=timedelta(hours=1), data={"user": 7}, actor="web", **COMMON)
    event = Event.objects.get(aggregate_id=schedule.pk)
    assert event.aggregate_version == 1
    assert event.event_ts == schedule.created_ts
    assert event.payload["actor"] == "web"
    definition = event.payload["definition"]
    assert datetime.fromisoformat(definition["start_ts"]) == schedule.start_ts
    assert definition["event_data"] == {"user": 7}
    assert definition["schedule_kind"] == "ONCE"
    assert definition["schedule_name"] == schedule.schedule_name
    assert event.metadata == {
        "actor": "web",
        "schedule_name": schedule.schedule_name,
        "origin": ScheduleOrigin.API,
    }
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.start_ts, stored.next_run_ts, stored.next_slot_ts) == (
        schedule.start_ts,
        schedule.next_run_ts,
        schedule.next_slot_ts,
    )


def test_a_delay_is_counted_from_the_database_clock(db_now):
    before = db_now()
    schedule = api.create_once(delay=timedelta(minutes=15), **COMMON)
    after = db_now()
    assert before + timedelta(minutes=15) <= schedule.start_ts <= after + timedelta(minutes=15)
    assert schedule.next_run_ts == schedule.next_slot_ts == schedule.start_ts
    assert schedule.state == ScheduleState.ACTIVE


def test_an_unnamed_schedule_is_named_by_its_key_or_its_id():
    by_id = api.create_once(delay=timedelta(minutes=1), **COMMON)
    assert by_id.schedule_name == str(by_id.schedule_id)
    by_key = api.create_once(delay=timedelta(minutes=1), key="order-42:reminder", **COMMON)
    assert by_key.schedule_name == "order-42:reminder"
    assert api.get("order-42:reminder") == by_key


def test_a_name_in_use_is_the_error_full_clean_gave_and_the_transaction_goes_on():
    api.create_interval("taken", every=1, **COMMON)
    with transaction.atomic():
        with pytest.raises(ValidationError) as excinfo:
            api.create_interval("taken", every=2, **COMMON)
        assert excinfo.value.message_dict == {
            NON_FIELD_ERRORS: ["Schedule with this Host id and Name already exists."]
        }
        # Nothing failed in the database: the caller's transaction is still usable.
        api.create_interval("free", every=1, **COMMON)
    assert Schedule.objects.count() == 2
    assert Event.objects.count() == 2


def test_a_check_the_python_twin_missed_is_still_refused_by_the_database(monkeypatch):
    """The database's constraints stay as the last line, with the same error."""
    fields, _holds = TWINS["dsched_schedule_end_after_start"]
    monkeypatch.setitem(TWINS, "dsched_schedule_end_after_start", (fields, lambda s: True))
    monkeypatch.setattr(Schedule, "clean", lambda self: None)
    with pytest.raises(ValidationError) as excinfo:
        api.create_interval("backwards", every=1, start=AT, end=AT - timedelta(days=1), **COMMON)
    assert excinfo.value.message_dict == {
        NON_FIELD_ERRORS: ["Constraint “dsched_schedule_end_after_start” is violated."]
    }
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


# -- the single create's statement: only the columns that differ from their defaults --

ALL_OPTIONS = {
    "end": AT + timedelta(days=30),
    "max_fires": 3,
    "misfire_policy": "SKIP",
    "misfire_grace_seconds": 60,
    "catch_up_limit": 7,
    "jitter_seconds": 5,
    "priority": -4,
}


def _database_default(name):
    """What Django puts in a field left to its ``db_default`` (a caller may pass it too)."""
    field = Schedule._meta.get_field(name)
    return DatabaseDefault(field.db_default, output_field=field)


def _from_instance(*, topic, event_type, actor=None, **fields):
    """The admin's and REST's create: an unsaved instance."""
    return creates.create_instance(
        Schedule(event_topic=topic, event_type=event_type, **fields), actor=actor
    )[0]


SINGLE_CREATES = {
    "delay": (api.create_once, {"delay": timedelta(minutes=15), "data": {"user": 1}}),
    "delay, key, defaults given": (
        api.create_once,
        {"delay": timedelta(minutes=15), "key": "k-1", "priority": 0, "catch_up_limit": 100},
    ),
    "at, named": (api.create_once, {"at": AT, "name": "at-named", "data": {"a": [1, 2.5]}}),
    "at, every option": (api.create_once, {"at": AT, **ALL_OPTIONS}),
    "interval": (api.create_interval, {"every": 5}),
    "interval, every option": (
        api.create_interval,
        {"every": 2, "unit": "HOURS", "start": AT, "time_zone": "Europe/Paris", **ALL_OPTIONS},
    ),
    "cron": (api.create_cron, {"cron": "0 2 * * *", "time_zone": "America/New_York"}),
    "an unsaved instance (the admin's and REST's create)": (
        _from_instance,
        {
            "schedule_name": "from-a-form",
            "schedule_kind": ScheduleKind.CRON,
            "cron_expression": "*/5 * * * *",
            "time_zone": "Europe/Berlin",
            "priority": 3,
            "event_data": {"a": 1},
        },
    ),
    "an unsaved instance holding database defaults": (
        _from_instance,
        {
            "schedule_name": "db-defaults",
            "schedule_kind": ScheduleKind.CRON,
            "cron_expression": "0 * * * *",
            "priority": _database_default("priority"),
            "paused_reason": _database_default("paused_reason"),
            "fire_count": _database_default("fire_count"),
        },
    ),
}


def _stored_row(pk):
    """Every concrete column of the stored schedule, as the model reads it."""
    columns = [f.attname for f in Schedule._meta.concrete_fields]
    return dict(
        zip(columns, Schedule.objects.filter(pk=pk).values_list(*columns).get(), strict=True)
    )


@pytest.mark.parametrize("case", sorted(SINGLE_CREATES))
def test_the_created_event_is_the_definition_built_from_the_stored_row(case):
    """The statement names only the columns that differ from their database defaults and
    writes the others' definition fields as a constant: the stored event must be exactly
    the object built from the stored row (what every reader has shown so far)."""
    create, kwargs = SINGLE_CREATES[case]
    schedule = create(**COMMON, actor="alice", **kwargs)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT e.payload,
                       jsonb_build_object('actor', 'alice', 'at', s.created_ts,
                           'definition', {audit.definition_sql("s")}),
                       e.metadata,
                       jsonb_build_object('actor', 'alice', 'schedule_name', s.schedule_name,
                           'origin', s.origin)
                FROM event_store_t e JOIN schedule_t s ON s.schedule_id = e.aggregate_id
                WHERE e.aggregate_id = %s""",
            [schedule.pk],
        )
        # jsonb comes back as text here: compared as JSON values (key order is not part of it).
        payload, from_row, metadata, metadata_from_row = map(json.loads, cursor.fetchone())
    assert payload == from_row
    assert metadata == metadata_from_row
    # And it is what the schedule is, field by field (times as the database spells them).
    expected = audit.definition(schedule)
    for name in ("start_ts", "end_ts"):
        value = payload["definition"][name]
        assert (value and datetime.fromisoformat(value)) == getattr(schedule, name)
        expected.pop(name)
    assert {k: v for k, v in payload["definition"].items() if k in expected} == expected


@pytest.mark.parametrize("case", sorted(SINGLE_CREATES))
def test_columns_left_to_the_database_store_what_the_instance_holds(case):
    """The instance a create returns and the row it stored agree on every column, those the
    statement named and those it left to their database default."""
    create, kwargs = SINGLE_CREATES[case]
    schedule = create(**COMMON, **kwargs)
    stored = _stored_row(schedule.pk)
    held = {name: getattr(schedule, name) for name in stored}
    assert held == stored


@pytest.mark.usefixtures("known_unlimited")
def test_a_delayed_message_names_only_the_columns_that_differ_from_their_defaults():
    with CaptureQueriesContext(connection) as queries:
        api.create_once(delay=timedelta(minutes=15), **COMMON)
        api.create_once(delay=timedelta(minutes=15), priority=7, **COMMON)
    first, second = (q["sql"] for q in queries)
    named = first[first.index("(") : first.index(")")]
    for column in ("priority", "catch_up_limit", "time_zone", "state", "fire_count", "end_ts"):
        assert f'"{column}"' not in named
    assert '"priority"' in second[second.index("(") : second.index(")")]
    assert Schedule.objects.filter(priority=7).count() == 1
    assert Schedule.objects.filter(priority=0).count() == 1


def test_a_value_is_left_to_the_database_only_when_it_is_the_same_value_of_the_same_kind():
    assert single_insert._is_default("UTC", "UTC")
    assert single_insert._is_default(ScheduleState.ACTIVE, "ACTIVE")
    assert single_insert._is_default(None, None)
    assert single_insert._is_default(0, 0)
    assert not single_insert._is_default(True, 1)
    assert not single_insert._is_default(1, True)
    assert not single_insert._is_default(0, None)
    assert not single_insert._is_default(None, "")
    assert not single_insert._is_default(0.0, 0)
    assert not single_insert._is_default("x", single_insert._UNSET)


def _prepared_creates() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ['WITH c AS (%INSERT INTO "schedule_t"%'],
        )
        return cursor.fetchone()[0]


def _fresh_session() -> None:
    """A new database session, as a new web worker or CONN_MAX_AGE = 0 request gets."""
    connection.close()
    connection.ensure_connection()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("known_unlimited")
def test_by_default_a_session_prepares_its_creates_from_the_second_on():
    """One create per session (CONN_MAX_AGE = 0) prepares nothing and asks nothing more; a
    session that makes more, on a direct connection, prepares them."""
    _fresh_session()
    with CaptureQueriesContext(connection) as queries:
        api.create_once("first", delay=timedelta(hours=1), **COMMON)
    assert len(queries) == 1
    assert _prepared_creates() == 0
    for n in range(3):
        api.create_once(f"then-{n}", delay=timedelta(hours=1), **COMMON)
    assert _prepared_creates() == 1
    assert Schedule.objects.count() == Event.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_by_default_a_session_through_a_pooler_prepares_nothing(monkeypatch):
    """PgBouncer < 1.22 in transaction mode cannot carry a prepared statement; a database
    entry set up for it says so (tests/integration/test_creates_pgbouncer.py finds a real
    PgBouncer by its cancel key)."""
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    _fresh_session()
    for n in range(3):
        api.create_once(f"pooled-{n}", delay=timedelta(hours=1), **COMMON)
    assert _prepared_creates() == 0


@pytest.mark.django_db(transaction=True)
def test_prepare_creates_off_prepares_nothing(settings):
    settings.DSCHED_PREPARE_CREATES = False
    _fresh_session()
    for create, kwargs in SINGLE_CREATES.values():
        create(**COMMON, **kwargs)
    for n in range(3):
        api.create_once(f"unprepared-{n}", delay=timedelta(hours=1), **COMMON)
    assert _prepared_creates() == 0


def test_with_prepare_creates_each_statement_is_prepared_and_does_the_same(settings):
    """DSCHED_PREPARE_CREATES: each variant of the statement is prepared by the server once
    and gives the same rows, events and errors, through Django's wrappers."""
    settings.DSCHED_PREPARE_CREATES = True
    for case, (create, kwargs) in sorted(SINGLE_CREATES.items()):
        schedule = create(**COMMON, **kwargs)
        stored = _stored_row(schedule.pk)
        assert stored == {name: getattr(schedule, name) for name in stored}, case
        event = Event.objects.get(aggregate_id=schedule.pk)
        assert event.payload["definition"]["schedule_name"] == schedule.schedule_name, case
    with CaptureQueriesContext(connection) as queries:
        for n in range(3):
            api.create_once(f"prepared-{n}", delay=timedelta(minutes=n), data={"n": n}, **COMMON)
    assert len(queries) == 3  # the query log and execute wrappers still see them
    with pytest.raises(ValidationError) as excinfo:
        api.create_once("prepared-1", delay=timedelta(minutes=1), **COMMON)
    assert excinfo.value.message_dict == {
        NON_FIELD_ERRORS: ["Schedule with this Host id and Name already exists."]
    }
    again = api.create_once(delay=timedelta(minutes=15), key="k-1", **COMMON)
    assert again.schedule_name == "k-1"
    assert Schedule.objects.filter(idempotency_key="k-1").count() == 1
    assert _prepared_creates() >= 4  # one per set of named columns
    assert Event.objects.count() == Schedule.objects.count() == len(SINGLE_CREATES) + 3


@pytest.mark.usefixtures("known_unlimited")
def test_with_prepare_creates_the_query_log_holds_the_statement_and_its_values(settings):
    """DEBUG's query log (connection.queries, CaptureQueriesContext, the debug toolbar) shows
    a prepared create as it shows an unprepared one: the statement with its values, not
    None (psycopg keeps no query text for a prepared execution)."""
    settings.DSCHED_PREPARE_CREATES = True
    logged = []
    for name in ("logged-1", "logged-2"):  # the first prepares the statement, the second reuses it
        with CaptureQueriesContext(connection) as queries:
            schedule = api.create_once(name, delay=timedelta(minutes=5), **COMMON)
        (query,) = queries.captured_queries
        logged.append((query["sql"], schedule))
    for sql, schedule in logged:
        assert isinstance(sql, str)
        assert sql.startswith('WITH c AS (\n    INSERT INTO "schedule_t"')
        assert f"'{schedule.schedule_name}'" in sql
        assert schedule.pk.hex in sql  # psycopg spells a uuid constant without dashes


def test_with_prepare_creates_a_rollback_deallocates_every_prepared_statement(settings):
    """psycopg sends DEALLOCATE ALL on a rollback once anything is prepared: why
    docs/pgbouncer.md asks for PgBouncer >= 1.22 (1.21 passes it on to the server)."""
    settings.DSCHED_PREPARE_CREATES = True
    api.create_once(delay=timedelta(minutes=5), **COMMON)
    assert _prepared_creates() == 1
    with pytest.raises(RuntimeError), transaction.atomic():
        api.create_once(delay=timedelta(minutes=5), **COMMON)
        raise RuntimeError
    assert _prepared_creates() == 0
    api.create_once(delay=timedelta(minutes=5), **COMMON)  # prepared again
    assert _prepared_creates() == 1
    assert Schedule.objects.count() == Event.objects.count() == 2


def test_with_prepare_creates_the_database_is_still_the_last_line(settings, monkeypatch):
    settings.DSCHED_PREPARE_CREATES = True
    fields, _holds = TWINS["dsched_schedule_end_after_start"]
    monkeypatch.setitem(TWINS, "dsched_schedule_end_after_start", (fields, lambda s: True))
    monkeypatch.setattr(Schedule, "clean", lambda self: None)
    with transaction.atomic(), pytest.raises(ValidationError) as excinfo:
        api.create_once(at=AT, end=AT - timedelta(days=1), **COMMON)
    assert excinfo.value.message_dict == {
        NON_FIELD_ERRORS: ["Constraint “dsched_schedule_end_after_start” is violated."]
    }
    assert _prepared_creates() == 1
    assert not Schedule.objects.exists()
    assert not Event.objects.exists()


# -- the Python twins of the constraints -------------------------------------------------


def base(kind: str = ScheduleKind.INTERVAL) -> Schedule:
    fields = {
        ScheduleKind.INTERVAL: {"frequency_unit": "MINUTES", "frequency_time": 5},
        ScheduleKind.CRON: {"cron_expression": "0 2 * * *"},
        ScheduleKind.ONCE: {},
    }[kind]
    return Schedule(
        schedule_name="twin",
        schedule_kind=kind,
        start_ts=AT,
        event_topic="mail",
        event_type="reminder.send",
        event_data={"a": 1},
        origin=ScheduleOrigin.API,
        **fields,
    )


# Each changes a valid schedule so that one rule (or several) is broken.
BROKEN = {
    "frequency zero": {"frequency_time": 0},
    "frequency negative": {"frequency_time": -4},
    "frequency missing": {"frequency_time": None},
    "unit unknown": {"frequency_unit": "FORTNIGHTS"},
    "unit missing": {"frequency_unit": ""},
    "kind unknown": {"schedule_kind": "SOMETIMES"},
    "cron missing": {"schedule_kind": ScheduleKind.CRON, "cron_expression": ""},
    "cron bad": {"schedule_kind": ScheduleKind.CRON, "cron_expression": "61 * * * *"},
    "policy unknown": {"misfire_policy": "LATER"},
    "origin unknown": {"origin": "ELSEWHERE"},
    "end before start": {"end_ts": AT - timedelta(days=1)},
    "end at start": {"end_ts": AT},
    "max fires zero": {"max_fires": 0},
    "catch-up zero": {"catch_up_limit": 0},
    "catch-up huge": {"catch_up_limit": 10_001},
    "jitter negative": {"jitter_seconds": -1},
    "jitter huge": {"jitter_seconds": 86_401},
    "grace negative": {"misfire_grace_seconds": -1},
    "health grace negative": {"health_grace_seconds": -1},
    "failure tolerance negative": {"failure_tolerance": -1},
    "no run time at all": {"max_runtime_seconds": 0},
    "state unknown": {"state": "SLEEPING"},
    "active but paused": {"state": ScheduleState.PAUSED, "active": True},
    "inactive but active": {"state": ScheduleState.ACTIVE, "active": False},
    "name empty": {"schedule_name": ""},
    "name with a line break": {"schedule_name": "a\nb"},
    "topic bad": {"event_topic": "two words"},
    "topic trailing newline": {"event_topic": "mail\n"},
    "type bad": {"event_type": "-x"},
    "data not an object": {"event_data": ["a"]},
    "key empty": {"idempotency_key": ""},
    "key too long": {"idempotency_key": "k" * 127},
    "key with an escape": {"idempotency_key": "k\x1b[31m"},
    "zone unknown": {"time_zone": "Mars/Base"},
    "naive start": {"start_ts": datetime(2030, 1, 1)},
    "priority huge": {"priority": 5000},
    "paused until the end of time": {"paused_until": datetime(9999, 12, 31, 12, tzinfo=UTC)},
    "rrule missing": {"schedule_kind": ScheduleKind.RRULE, "rrule": ""},
    "rrule bad": {"schedule_kind": ScheduleKind.RRULE, "rrule": "FREQ=FORTNIGHTLY"},
    "calendar policy unknown": {"calendar_policy": "SIDEWAYS"},
    "calendars too many": {"calendar_ids": [uuid.uuid4() for _ in range(11)]},
    "calendars empty": {"calendar_ids": []},
    "fine": {},
    "fine with a key": {"idempotency_key": "order-1"},
    "rrule fine": {"schedule_kind": ScheduleKind.RRULE, "rrule": "FREQ=DAILY;BYHOUR=9"},
    "once fine": {"schedule_kind": ScheduleKind.ONCE, "frequency_unit": "", "frequency_time": None},
    # The overlap and failure policies (models/overlap.py).
    "overlap unknown": {"overlap_policy": "QUEUE"},
    "overlap on a one-shot": {
        "schedule_kind": ScheduleKind.ONCE,
        "frequency_unit": "",
        "frequency_time": None,
        "overlap_policy": "SKIP",
    },
    "held without a policy that holds": {"held_by": uuid.UUID(int=7)},
    "fine with an overlap policy": {"overlap_policy": "BUFFER_ONE", "pause_on_failure": True},
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_python_validation_gives_exactly_what_full_clean_gives(case):
    """``full_clean()`` asks the database (one query per constraint); the twins must agree
    with it on every case, message for message."""
    schedule = base()
    for name, value in BROKEN[case].items():
        setattr(schedule, name, value)
    by_database, in_python = copy.deepcopy(schedule), copy.deepcopy(schedule)
    try:
        by_database.full_clean()
        expected = {}
    except ValidationError as exc:
        expected = exc.message_dict
    try:
        validate_new(in_python, FieldCache())
        got = {}
    except ValidationError as exc:
        got = exc.message_dict
    assert got == expected
    assert (case.startswith(("fine", "once fine", "rrule fine"))) == (expected == {})


def test_every_check_constraint_has_a_python_twin_and_the_unique_ones_a_mapping():
    for constraint in Schedule._meta.constraints:
        if isinstance(constraint, CheckConstraint):
            assert constraint.name in TWINS, f"{constraint.name} has no Python twin"
            fields, _holds = TWINS[constraint.name]
            for name in fields:
                Schedule._meta.get_field(name)
        else:
            assert isinstance(constraint, UniqueConstraint)
            assert constraint.name in (constraints.NAME_UNIQUE, constraints.KEY_UNIQUE)
    assert set(TWINS) == {
        c.name for c in Schedule._meta.constraints if isinstance(c, CheckConstraint)
    }


@pytest.mark.parametrize("name", sorted(TWINS))
def test_each_twin_refuses_what_its_constraint_refuses_with_its_message(name):
    """For each CHECK constraint: a row the twin refuses is refused by the database too,
    and the twin's error is the constraint's own message."""
    constraint = next(c for c in Schedule._meta.constraints if c.name == name)
    violations = [case for case, change in BROKEN.items() if not TWINS[name][1](_changed(change))]
    assert violations, f"no case in BROKEN breaks {name}"
    for case in violations:
        schedule = _changed(BROKEN[case])
        with pytest.raises(DjangoValidationError):
            constraint.validate(Schedule, schedule)  # asks the database
        try:
            validate_new(schedule, FieldCache())
        except ValidationError as exc:
            messages = exc.messages
        else:
            pytest.fail(f"{case}: validate_new accepted it")
        twin_message = constraint.get_violation_error_message()
        failed_fields = set(BROKEN[case]) & set(TWINS[name][0])
        assert twin_message in messages or failed_fields, (case, messages)


def _changed(change: dict) -> Schedule:
    schedule = base()
    for field, value in change.items():
        setattr(schedule, field, value)
    return schedule


def test_errors_name_the_arguments_the_caller_gave():
    """Never the table's names (frequency_time, start_ts, event_topic, end_ts)."""
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=0, topic="", event_type="x", end=AT, start=AT)
    assert set(refused.value.message_dict) >= {"every", "topic"}
    assert not set(refused.value.message_dict) & {"frequency_time", "event_topic", "end_ts"}
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=1, start=AT, end=AT - timedelta(days=1), **COMMON)
    assert (
        "end" in str(refused.value.message_dict) or NON_FIELD_ERRORS in refused.value.message_dict
    )
    with pytest.raises(ValidationError) as refused:
        api.create_once("bad", at=datetime(1800, 1, 1, tzinfo=UTC), **COMMON)
    assert set(refused.value.message_dict) == {"at"}
    with pytest.raises(ValidationError) as refused:
        api.create_cron("bad", cron="61 * * * *", **COMMON)
    assert refused.value.message_dict["cron"] == [
        "Invalid cron expression: 61 is out of range in the minute field of '61 * * * *': "
        "it takes 0 to 59."
    ]
    assert not Schedule.objects.exists()


def test_a_choice_that_is_not_one_lists_the_choices():
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=1, unit="FORTNIGHTS", **COMMON)
    assert refused.value.message_dict == {
        "unit": ["'FORTNIGHTS' is not one of SECONDS, MINUTES, HOURS, DAYS, WEEKS, MONTHS, YEARS."]
    }
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=1, misfire_policy="LATER", **COMMON)
    assert refused.value.message_dict["misfire_policy"] == [
        "'LATER' is not one of COALESCE, CATCH_UP, SKIP."
    ]


def test_a_unit_in_any_case_is_a_unit():
    schedule = api.create_interval("lower", every=30, unit="seconds", **COMMON)
    assert (schedule.frequency_unit, schedule.frequency_time) == ("SECONDS", 30)


@pytest.mark.parametrize(
    ("every", "expected"),
    [
        (timedelta(minutes=5), (5, "MINUTES")),
        (timedelta(hours=2), (2, "HOURS")),
        (timedelta(days=1), (24, "HOURS")),
        (timedelta(seconds=90), (90, "SECONDS")),
    ],
)
def test_every_may_be_a_timedelta(every, expected):
    schedule = api.create_interval(None, every=every, **COMMON)
    assert (schedule.frequency_time, schedule.frequency_unit) == expected
    [spec_made] = api.bulk_create([api.Interval(every=every, **COMMON)])
    assert (spec_made.frequency_time, spec_made.frequency_unit) == expected


@pytest.mark.parametrize(
    ("every", "unit", "message"),
    [
        (timedelta(minutes=5), "MINUTES", "not both"),
        (timedelta(milliseconds=1500), None, "whole seconds"),
        (timedelta(0), None, "at least one"),
        (timedelta(seconds=-60), None, "at least one"),
    ],
)
def test_a_timedelta_every_that_cannot_be_a_grid_is_a_clear_error(every, unit, message):
    with pytest.raises(ValidationError) as refused:
        api.create_interval("bad", every=every, unit=unit, **COMMON)
    assert list(refused.value.message_dict) == ["every"]
    assert message in refused.value.message_dict["every"][0]
    assert not Schedule.objects.exists()
