"""Retention deletes exactly the delivered history older than the retention."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from django_dsched.enums import DeliveryStatus
from django_dsched.history.expiry import cutoff_of
from django_dsched.models import Event, OutboxMessage
from django_dsched.outbox import retention
from django_dsched.outbox.retention import count_expired, purge_expired
from tests.helpers import other_session, sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86400


def history(count: int, *, age_days: float, status: str, delivered_days: float | None = None):
    """Messages (and their events) that fired ``age_days`` ago, in ``status``."""
    ids = make_messages(count, age=age_days * DAY, status=status)
    if status == DeliveryStatus.DELIVERED:
        ago = timedelta(days=age_days if delivered_days is None else delivered_days)
        sql(
            "UPDATE outbox_message_t SET delivered_ts = statement_timestamp() - %s"
            " WHERE id = ANY(%s)",
            [ago, ids],
        )
    return ids


def remaining(ids):
    return (
        OutboxMessage.objects.filter(id__in=ids).count(),
        Event.objects.filter(id__in=ids).count(),
    )


@pytest.fixture
def mixed_history(settings):
    settings.DSCHED_RETENTION_DAYS = 45
    return {
        "old_delivered": history(5, age_days=50, status=DeliveryStatus.DELIVERED),
        "recent_delivered": history(2, age_days=10, status=DeliveryStatus.DELIVERED),
        # Fired long ago but delivered yesterday (a dead letter an operator retried).
        "late_delivered": history(
            1, age_days=60, status=DeliveryStatus.DELIVERED, delivered_days=1
        ),
        "old_dead": history(2, age_days=90, status=DeliveryStatus.DELIVERY_FAILED),
        "old_pending": history(1, age_days=46, status=DeliveryStatus.PENDING),
    }


def test_purge_deletes_exactly_the_expired_history(mixed_history):
    assert count_expired() == count_expired(days=45)
    found = count_expired()
    assert (found.outbox, found.events) == (5, 5)

    purged = purge_expired(batch_size=2)

    assert (purged.outbox, purged.events, purged.more) == (5, 5, False)
    assert remaining(mixed_history["old_delivered"]) == (0, 0)
    assert remaining(mixed_history["recent_delivered"]) == (2, 2)
    # Its message was delivered yesterday: kept, and so is its 60-day-old event (the message
    # reads its payload from it).
    assert remaining(mixed_history["late_delivered"]) == (1, 1)
    assert remaining(mixed_history["old_dead"]) == (2, 2)  # dead letters stay until handled
    assert remaining(mixed_history["old_pending"]) == (1, 1)
    assert purge_expired() == purge_expired().__class__(0, 0, False)


def test_purge_is_bounded_per_call(mixed_history):
    purged = purge_expired(batch_size=2, max_batches=1)
    assert (purged.outbox, purged.events, purged.more) == (2, 2, True)
    purged = purge_expired(batch_size=100)
    assert (purged.outbox, purged.events, purged.more) == (3, 3, False)


def test_purge_skips_rows_locked_by_others(mixed_history):
    locked = mixed_history["old_delivered"][0]
    with other_session() as session, session.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT 1 FROM outbox_message_t WHERE id = %s FOR UPDATE", [locked])
        purged = purge_expired()  # does not wait for the lock
        cursor.execute("ROLLBACK")
    assert purged.outbox == 4
    assert OutboxMessage.objects.filter(id=locked).exists()


def test_retention_off_deletes_nothing(mixed_history, settings):
    settings.DSCHED_RETENTION_DAYS = None
    assert purge_expired() == purge_expired().__class__()
    assert OutboxMessage.objects.count() == 11


def test_purge_history_command(mixed_history, capsys):
    call_command("purge_history", dry_run=True)
    assert "Would delete 5 outbox message(s) and 5 event(s)." in capsys.readouterr().out
    assert OutboxMessage.objects.count() == 11

    call_command("purge_history", days=5, batch_size=3)
    assert "Deleted 7 outbox message(s) and 7 event(s)." in capsys.readouterr().out


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.parametrize("statement", ["PURGE_EVENTS", "COUNT_EVENTS"])
def test_the_event_purge_probes_each_events_message_by_its_key(statement):
    """Whether a message keeps its event is a primary-key probe per expired event, never a
    scan of the whole outbox (with fresh statistics and a few thousand rows the planner
    chose a hash anti join over both tables: 222 ms per pass at 300,000 events)."""
    pending = history(2000, age_days=60, status=DeliveryStatus.PENDING)
    delivered = history(1000, age_days=60, status=DeliveryStatus.DELIVERED, delivered_days=1)
    sql("ANALYZE outbox_message_t")
    sql("ANALYZE event_store_t")
    params = {**retention._params(cutoff_of(45), 1000)}
    ((plan,),) = sql("EXPLAIN (FORMAT JSON) " + getattr(retention, statement), params)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    outbox = [
        node
        for node in _plan_nodes(plan[0]["Plan"])
        if node.get("Relation Name", "").startswith("outbox_message_t")
    ]
    assert outbox
    for node in outbox:
        shown = {k: v for k, v in node.items() if k != "Plans"}
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), shown
        assert node["Index Name"].endswith("_pkey"), shown
    joins = {node.get("Join Type") for node in _plan_nodes(plan[0]["Plan"])}
    assert not joins & {"Anti", "Right Anti"}, joins
    # And it still decides the same: every event is kept (its message exists).
    assert count_expired(days=45).events == 0
    assert purge_expired(days=45).events == 0
    assert remaining(pending + delivered) == (3000, 3000)
