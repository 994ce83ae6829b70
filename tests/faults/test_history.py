"""History upkeep (make days, drop days, retention's deletes: the leader's history thread,
``purge_history``, ``run_scheduler --once``): rows the database refuses to move or delete,
rows holding values at the edges of their types, and the database gone in the middle of a
pass. One failing part never keeps the others from running; what failed is tried again at
the next pass."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError

from django_dsched.history.partitions import DAYS_AHEAD
from django_dsched.scheduler.retention_worker import worker_for
from tests.faults.harness import LAST_TIMESTAMP, REFUSALS, refusing_all, terminated_at
from tests.faults.history import (
    delivered_fires,
    exists,
    expired_day,
    has_day,
    missing_day,
    missing_days,
    today,
)
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def upkeep():
    """The leader's history thread, driven a pass at a time on this thread."""
    return worker_for(lambda: True, "janitor", "default", pause=0.5)


def refused_moves():
    """Two missing days, the last two ahead; the rows of the first wait in the default
    partitions, their move refused: by a CHECK (copied into the new day's table) and by a
    trigger on the default partition. The day, the one after, the rules."""
    day, later = missing_days(DAYS_AHEAD - 1, DAYS_AHEAD)
    moved = delivered_fires(day, 2)
    rules = [
        ("event_store_t", f"{{r}}.id = '{moved[0]}'", "check"),
        ("outbox_message_t_default", f"{{r}}.id = '{moved[1]}'", "trigger"),
    ]
    return day, later, rules


def test_a_refused_move_does_not_keep_retention_from_running():
    day, _later, rules = refused_moves()
    old = delivered_fires(expired_day(), 3)
    worker = upkeep()
    with refusing_all(rules):
        worker._purge()
        out, err = StringIO(), StringIO()
        call_command("purge_history", stdout=out, stderr=err)
    assert not has_day(day)
    assert exists(old) == 0  # the expired day went all the same
    assert f"Could not make the partitions of {day:%Y-%m-%d}" in err.getvalue()


def test_a_refused_move_does_not_keep_the_other_days_from_being_made():
    day, later, rules = refused_moves()
    with refusing_all(rules):
        upkeep()._purge()
    assert has_day(later) and not has_day(day)


def test_a_row_the_database_refuses_to_delete():
    """A trigger refusing one expired message's delete (a CHECK never refuses a delete):
    the others go, that one stays, logged."""
    old = delivered_fires(today().replace(year=today().year - 1), 5)  # the default partition
    rules = [("outbox_message_t_default", f"{{r}}.id = '{old[0]}'", "trigger")]
    with refusing_all(rules):
        upkeep()._purge()
    assert exists(old) == 1


# Messages in a day past the retention holding delivery times at the edges of their type.
@pytest.mark.parametrize("delivered", ["'infinity'", "'-infinity'", LAST_TIMESTAMP])
def test_a_delivery_time_at_the_edges_in_a_day_past_the_retention(unchecked, delivered):
    """Written before the range CHECK (which refuses such a time now)."""
    odd, plain = expired_day(50), expired_day(49)
    with unchecked("outbox_message_t"):
        delivered_fires(odd, 1, delivered_ts=delivered)
    gone = delivered_fires(plain, 3)
    upkeep()._purge()
    assert exists(gone) == 0  # the plain day went; the odd one is held (or went)


def test_rows_at_the_edges_in_the_default_partitions(unchecked):
    """Times at the edges of timestamptz in the default partitions (written before the
    range CHECKs): making days and retention run around them."""
    year_ago = today().replace(year=today().year - 1)
    old = delivered_fires(year_ago, 3)
    odd = delivered_fires(year_ago, 4)
    with unchecked("event_store_t"), unchecked("outbox_message_t"):
        write_edges(odd)
    day = missing_day()
    worker = upkeep()
    assert worker._purge() == worker.interval
    assert has_day(day) and exists(old) == 0


def write_edges(odd: list[str]) -> None:
    sql(
        "UPDATE event_store_t SET event_ts = v.ts FROM (VALUES"
        " (%s::uuid, '-infinity'::timestamptz), (%s::uuid, 'infinity'),"
        f" (%s::uuid, {LAST_TIMESTAMP})) AS v(id, ts)"
        " WHERE event_store_t.id = v.id",
        odd[:3],
    )
    sql("UPDATE outbox_message_t SET delivered_ts = '-infinity' WHERE id = %s", [odd[3]])


# The statements of a pass where the database goes away: a day's attach (making days), a
# day's detach (dropping days), a delete from the default partitions (retention).
PASS = (
    r"ATTACH PARTITION",
    r"DETACH PARTITION",
    r"^\s*DELETE FROM outbox_message_t_default",
)


def test_the_database_gone_in_the_middle_of_a_pass():
    day = missing_day()
    dropped = delivered_fires(expired_day(), 3)
    purged = delivered_fires(today().replace(year=today().year - 1), 3)
    kept = delivered_fires(today(), 3)
    worker = upkeep()
    with terminated_at(*PASS) as met:
        with pytest.raises(OperationalError):
            call_command("purge_history", stdout=StringIO(), stderr=StringIO())
        for _ in range(5):
            worker._purge()
            if len(met) == len(PASS):
                break
    assert sorted(met) == sorted(PASS)
    worker._purge()  # the next pass does what the cut ones did not
    assert has_day(day)
    assert (exists(dropped), exists(purged), exists(kept)) == (0, 0, 3)
    call_command("purge_history", stdout=StringIO(), stderr=StringIO())
    assert REFUSALS  # (every kind of refusal is in the cells above)
