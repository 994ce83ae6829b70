"""The commands' start: reach the database, then Django's migration check, which may fail on
a database lost meanwhile (tried again after a backoff) or end a --once run in one line."""

from __future__ import annotations

import logging

import pytest
from django.core.management.base import CommandError
from django.db import OperationalError

from django_dsched.management._process import reach_database
from django_dsched.runtime.loops import DatabaseLoop

pytestmark = pytest.mark.django_db(transaction=True)


class Loop(DatabaseLoop):
    kind = "test"

    def __init__(self) -> None:
        super().__init__("t", None)

        class Stats:
            db_errors = 0

        self.stats = Stats()


class Command:
    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def check_migrations(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError("server closed the connection unexpectedly")


def test_a_check_that_fails_on_the_database_is_tried_again_after_a_backoff():
    loop, command = Loop(), Command(failures=2)
    assert reach_database(command, loop, once=False)
    assert command.calls == 3
    assert loop.outage_attempts == 2 and loop._backoff.attempt == 2


def test_a_once_run_fails_in_one_line():
    with pytest.raises(CommandError, match=r"^cannot reach the database: server closed"):
        reach_database(Command(failures=1), Loop(), once=True)


def test_a_stop_while_waiting_ends_the_wait():
    loop = Loop()
    loop.stop()
    assert not reach_database(Command(failures=0), loop, once=False)


def test_a_missing_table_that_is_not_the_packages_is_the_error_it_is(caplog):
    """A round that meets a missing table of someone else's (a user's trigger writing to a
    table that is gone) logs the error with its traceback; only the package's own tables
    missing make the loop wait for migrate."""
    from django.db import connection

    def step() -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM dsched_test_no_such_table")
        return 0.0

    loop = Loop()
    with caplog.at_level(logging.ERROR, logger="django_dsched"):
        loop._guarded(step)
    [record] = [r for r in caplog.records if r.getMessage().startswith("database error")]
    assert record.exc_info is not None
    assert "dsched_test_no_such_table" in str(record.exc_info[1])
    assert not loop.waiting_for_tables and loop.stats.db_errors == 1


def test_an_outage_after_a_wait_for_the_tables_is_a_new_one(caplog):
    """Waiting for migrate, then losing the server: the loss is said as the start of an
    outage (not "still" one, counting the rounds that waited for the tables)."""
    from django_dsched.exceptions import MissingTables

    loop = Loop()
    with caplog.at_level(logging.WARNING, logger="django_dsched"):
        loop.note_outage(MissingTables("django-dsched's tables are not in ..."), 0.1)
        loop.note_outage(MissingTables("django-dsched's tables are not in ..."), 0.2)
        assert loop.waiting_for_tables and loop.outage_attempts == 2
        loop.note_outage(OperationalError("connection refused"), 0.4)
    assert not loop.waiting_for_tables and loop.outage_attempts == 1
    said = [record.getMessage() for record in caplog.records]
    assert said[0].startswith("not ready: django-dsched's tables")
    assert said[-1].startswith("database unavailable: connection refused")
