"""What reads (quota and rate reads, the database-wide gauges, the admin's and REST's list
pages, ``dsched list``) do with rows holding values at the edges of their types, and with
the database gone in the middle of a read. A read takes no lock anyone waits on and writes
nothing, so a refusal has nothing to refuse there."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import OperationalError, close_old_connections, connection
from django.test import Client
from django.urls import reverse

from django_dsched import api
from django_dsched.exceptions import QuotaExceeded
from django_dsched.metrics.database import DatabaseCollector, read_gauges
from django_dsched.models import Schedule
from tests.faults.harness import (
    INTEGER_MAX,
    LAST_TIMESTAMP,
    deep_json,
    drive,
    elections,
    every_second,
    fire_times,
    leader,
    terminated_at,
    write_by_hand,
)
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"topic": "reports", "event_type": "report.build"}

# Hosts whose quota row holds a value at the edge of its type (written by hand: the
# admin's form and the model's validators refuse most of them).
RATES = {"NaN": "'NaN'", "Infinity": "'Infinity'", "1e308": "1e308", "0.001": "0.001"}
SCHEDULE_QUOTAS = {"largest integer": str(INTEGER_MAX), "zero": "0"}


def quota_row(host: uuid.UUID, rate: str = "NULL", schedules: str = "NULL") -> None:
    sql(
        "INSERT INTO tenant_quota_t (host_id, max_fires_per_second, max_active_schedules)"
        f" VALUES (%s, {rate}, {schedules})",
        [host],
    )


def test_quota_and_rate_rows_at_the_edges_of_their_types(db_now):
    start = db_now() - timedelta(seconds=2)
    healthy = every_second(start, 3)
    hosts = {what: uuid.uuid4() for what in [*RATES, *SCHEDULE_QUOTAS]}
    for what, rate in RATES.items():
        quota_row(hosts[what], rate=rate)
    for what, limit in SCHEDULE_QUOTAS.items():
        quota_row(hosts[what], schedules=limit)
    limited = {what: every_second(start, 2, host_id=hosts[what]) for what in RATES}
    scheduler = leader()
    try:
        since = db_now()
        drive(scheduler, 5, until=lambda: all(fire_times(healthy, since).values()))
        before = elections()
        drive(scheduler, 1.5)
    finally:
        scheduler.shutdown()
    assert all(fire_times(healthy, since).values())
    assert (elections(), scheduler.stats.leaderships, scheduler.stats.db_errors) == (before, 1, 0)
    # No limit to speak of fires on; the slowest rate there is fires once (a full bucket).
    for what in ("NaN", "Infinity", "1e308"):
        assert all(fire_times(limited[what], since).values()), what
    assert sum(len(t) for t in fire_times(limited["0.001"], since).values()) <= 2
    # Creates: the largest quota takes one more; a quota of none refuses it, saying so.
    api.create_interval(every=1, unit="MINUTES", host_id=hosts["largest integer"], **COMMON)
    with pytest.raises(QuotaExceeded, match="at most 0 live schedules"):
        api.create_interval(every=1, unit="MINUTES", host_id=hosts["zero"], **COMMON)


def test_the_database_gone_while_rates_and_quotas_are_read(db_now):
    """The loop's read of the rates: it reconnects and leads again (one election). A
    create's read of its host's quota: the caller gets the database's error, nothing is
    written, and the next create (a new session) is made."""
    healthy = every_second(db_now() - timedelta(seconds=2), 3)
    host = uuid.uuid4()
    quota_row(host, rate="100", schedules="10")
    scheduler = leader()
    try:
        drive(scheduler, 0.2)
        before = elections()
        since = db_now()
        scheduler._next_rates = 0  # read them now
        with terminated_at(r"FROM tenant_quota_t") as met:
            drive(scheduler, 3, until=lambda: met)
        drive(
            scheduler,
            5,
            until=lambda: all(len(t) >= 2 for t in fire_times(healthy, since).values()),
        )
    finally:
        scheduler.shutdown()
    assert met and elections() - before <= 1
    assert all(len(t) >= 2 for t in fire_times(healthy, since).values())
    with terminated_at(r"FROM tenant_quota_t") as met, pytest.raises(OperationalError):
        api.create_interval(name="cut", every=1, unit="MINUTES", host_id=host, **COMMON)
    connection.close()  # what Django does at the end of the request that met the error
    assert met and not Schedule.objects.filter(schedule_name="cut").exists()
    api.create_interval(name="cut", every=1, unit="MINUTES", host_id=host, **COMMON)


def test_database_gauges_with_rows_at_the_edges_of_their_types(db_now, unchecked):
    """Written before the range CHECKs (which refuse such times now)."""
    every_second(db_now() - timedelta(seconds=2), 2)
    [odd] = every_second(db_now(), 1)
    with unchecked("schedule_t"):
        assert write_by_hand("schedule_t", "schedule_id", odd.pk, next_run_ts="'-infinity'")
    make_messages(2, age=5)
    [message] = make_messages(1)
    with unchecked("outbox_message_t"):
        assert write_by_hand("outbox_message_t", "id", message, event_ts="'-infinity'")
    gauges = read_gauges()
    assert (gauges.due, gauges.outbox_ready) == (3, 3)
    assert 1 <= gauges.oldest_due_age < 60 and 4 <= gauges.oldest_ready_age < 60


def test_the_database_gone_in_the_middle_of_a_scrape():
    """A scrape whose read fails says so (``dsched_database_gauges_up`` 0) with the
    process's own series; the next scrape reads again."""
    make_messages(2)
    collector = DatabaseCollector(close_connection=True)
    with terminated_at(r"FROM outbox_message_t") as met:
        first = {m.name: m.samples[0].value for m in collector.collect()}
    second = {m.name: m.samples[0].value for m in collector.collect()}
    assert met and first == {"dsched_database_gauges_up": 0}
    assert second["dsched_database_gauges_up"] == 1 and second["dsched_outbox_ready_messages"] == 2


def pages() -> dict[str, int | str]:
    """Every list page's answer: the admin's, REST's and ``dsched list``."""
    user = User.objects.filter(username="operator").first() or User.objects.create_superuser(
        "operator", "operator@example.com", "x"
    )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    answers: dict[str, int | str] = {}
    for model in ADMIN_LISTS:
        answers[model] = client.get(reverse(f"admin:dsched_{model}_changelist")).status_code
    for path in ("schedules/", "outbox/", "cluster/"):
        answers[path] = client.get(f"/api/dsched/{path}").status_code
    try:
        call_command("dsched", "list", stdout=StringIO())
        answers["dsched list"] = 200
    except Exception as exc:  # what the operator would see instead of the list
        answers["dsched list"] = type(exc).__name__
    return answers


ADMIN_LISTS = ("schedule", "outboxmessage", "event", "schedulerinstance")
EVERY_PAGE = dict.fromkeys((*ADMIN_LISTS, "schedules/", "outbox/", "cluster/", "dsched list"), 200)

# Times Python cannot hold, written by hand on a row of each table the pages list.
UNREADABLE_TIMES = [
    ("schedule_t", "schedule_id", {"next_slot_ts": "'infinity'"}),
    ("schedule_t", "schedule_id", {"next_run_ts": "'-infinity'"}),
    ("schedule_t", "schedule_id", {"start_ts": LAST_TIMESTAMP, "end_ts": "NULL"}),
    ("outbox_message_t", "id", {"event_ts": "'-infinity'"}),
    ("event_store_t", "id", {"event_ts": "'infinity'"}),
]


def odd_rows(db_now, rows) -> int:
    every_second(db_now(), 2)
    make_messages(2)
    written = 0
    for table, key, columns in rows:
        value = every_second(db_now(), 1)[0].pk if table == "schedule_t" else make_messages(1)[0]
        written += write_by_hand(table, key, value, **columns)
    return written


def test_list_pages_with_times_python_cannot_hold(db_now):
    """The database refuses such a time (the range CHECKs): no such row can be written, and
    every list page answers. (A row written before the CHECKs is mended by the loop that
    meets it: the fire path's set-aside, the relay's claim, the leader's resumes.)"""
    assert odd_rows(db_now, UNREADABLE_TIMES) == 0
    assert pages() == EVERY_PAGE


def test_list_pages_with_data_nested_past_pythons_limit(db_now):
    deep = f"'{deep_json(10_000)}'::jsonb"
    odd_rows(
        db_now,
        [
            ("schedule_t", "schedule_id", {"event_data": deep}),
            ("event_store_t", "id", {"payload": deep}),
        ],
    )
    assert pages() == EVERY_PAGE


def test_the_database_gone_in_the_middle_of_a_page(db_now):
    """The request that meets it answers 500 (Django's error page; nothing is written by
    a list); Django closes the broken session at the end of that request, and the next
    request answers."""
    every_second(db_now(), 3)
    pages()  # the user, and a first look
    with terminated_at(r"FROM \"schedule_t\"") as met:
        cut = pages()
    close_old_connections()
    assert met and cut["schedule"] == 500
    assert pages() == EVERY_PAGE
