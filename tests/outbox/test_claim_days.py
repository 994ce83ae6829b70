"""The relay's statements plan only the day partitions that hold their messages.

``outbox_message_t`` and ``event_store_t`` keep a partition per day (45 days of history by
default, and a week ahead): a claim that named the parent unbounded was planned over every
one of them, eleven times. A claim names the range of the pending messages' ids, and a
settle or a renewal the range of the ids it writes, as values, so PostgreSQL leaves the
other days out of the plan. These tests check the plan, and that no message is missed for
it: one in an old day, one in the default partition, one written after the range was read.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_dsched.enums import DeliveryStatus
from django_dsched.history.partitions import (
    EVENTS,
    OUTBOX,
    bound,
    day_of,
    make_day,
    partition,
    whole_days,
)
from django_dsched.models import outbox as outbox_model
from django_dsched.outbox.claims import (
    ALL_IDS,
    CLAIM,
    claim_args,
    claim_batch,
    pending_ids,
    seconds_until_claimable,
    statuses,
)
from django_dsched.outbox.holding import EXTEND, extend
from django_dsched.outbox.messages import Claimer, DeliveryOutcome
from django_dsched.outbox.settling import SETTLE, id_range, settle
from django_dsched.runtime import binding
from tests.helpers import sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86_400.0
PAST = (10, 11, 12)  # days of history kept, nothing pending in them


def claimer() -> Claimer:
    return Claimer("r1", visibility_timeout=30, max_attempts=5)


def today() -> date:
    return sql("SELECT (statement_timestamp() AT TIME ZONE 'UTC')::date")[0][0]


@pytest.fixture
def history() -> Iterator[list[date]]:
    """The days of :data:`PAST` made as partitions (dropped after the test)."""
    days = [today() - timedelta(days=n) for n in PAST]
    for day in days:
        make_day(day)
    yield days
    for day in days:
        for table in (OUTBOX, EVENTS):
            sql(f"DROP TABLE IF EXISTS {partition(table, day)}")


def planned(statement: str, params: dict[str, Any]) -> set[str]:
    """The tables of ``statement``'s plan, bound on the server as the relay binds it."""
    with transaction.atomic(), binding.cursor(connection) as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + statement, params)
        text = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    return set(re.findall(r"\b((?:outbox_message_t|event_store_t)_\w+)", text))


def days_in(tables: set[str]) -> set[str]:
    return {name for name in tables if re.search(r"_\d{8}$", name)}


def test_a_claim_plans_only_the_days_that_hold_pending_messages(history) -> None:
    make_messages(5, age=1)
    with connection.cursor() as cursor:
        ids = pending_ids(cursor)
    assert ids is not None
    params = {**claim_args(claimer(), 100), **ids}
    here = {partition(table, today()) for table in (OUTBOX, EVENTS)}
    tables = planned(CLAIM, params)
    assert days_in(tables) == here, "days without a pending message planned"
    assert not {f"{table}_default" for table in (OUTBOX, EVENTS)} & tables
    # Without the range every day kept is planned: what the range saves.
    everything = days_in(planned(CLAIM, {**params, **ALL_IDS}))
    assert {partition(OUTBOX, day) for day in history} <= everything


def test_a_settle_and_a_renewal_plan_only_the_days_of_their_messages(history) -> None:
    ids = make_messages(3, age=1)
    params = {**id_range(ids), "ids": ids, "attempts": [1] * 3, "relay": "r1"}
    params.update(pending=DeliveryStatus.PENDING.value)
    recorded = {
        **params,
        **statuses(),
        "max_attempts": 5,
        "started_ago": [0.0] * 3,
        "ended_ago": [0.0] * 3,
        "errors": None,
        "permanent_flags": None,
        "delays": None,
        "times": False,
    }
    for statement, values in (
        (SETTLE, recorded),
        (EXTEND, {**params, "visibility": 30.0, "ago": [None] * 3}),
    ):
        assert days_in(planned(statement, values)) == {partition(OUTBOX, today())}


def test_a_claim_takes_the_pending_messages_of_any_day(history) -> None:
    old = make_messages(2, age=PAST[0] * DAY)  # in a day of history
    stray = make_messages(1, age=100 * DAY)  # no such day: the default partition
    new = make_messages(2, age=1)
    assert sql("SELECT count(DISTINCT tableoid) FROM outbox_message_t")[0][0] == 3
    with connection.cursor() as cursor:
        claimed = claim_batch(cursor, claimer(), 100)
    assert {m.id for m in claimed.live} == set(old + stray + new)


def test_no_pending_message_claims_nothing_and_writes_nothing() -> None:
    make_messages(2, status=DeliveryStatus.DELIVERED)
    with connection.cursor() as cursor:
        assert pending_ids(cursor) is None
        claimed = claim_batch(cursor, claimer(), 100)
    assert claimed.live == [] and claimed.dead == []


def test_a_message_written_after_the_range_is_claimed_by_the_next_claim(history) -> None:
    first = make_messages(1, age=PAST[0] * DAY)  # the range: that day, whole
    with connection.cursor() as cursor:
        ids = pending_ids(cursor)
        late = make_messages(1, age=PAST[1] * DAY)  # a late fire of an older slot: below it
        new = make_messages(1, age=0)  # a new fire, today: above it
        assert ids is not None and late[0] < ids["low"] and new[0] > ids["high"]
        with transaction.atomic():
            cursor.execute(CLAIM, {**claim_args(claimer(), 100), **ids})
            taken = {row[0] for row in cursor.fetchall()}
        assert taken == set(first)  # this claim's range reached neither
        # What tells the relay to claim again when a claim comes back short sees them now.
        until = seconds_until_claimable(cursor)
        assert until is not None and until <= 0
        again = claim_batch(cursor, claimer(), 100)
    assert {m.id for m in again.live} == set(late + new)


def test_renewals_and_outcomes_reach_messages_of_several_days(history) -> None:
    make_messages(2, age=PAST[2] * DAY)
    make_messages(2, age=5)
    relay = claimer()
    with connection.cursor() as cursor:
        claimed = claim_batch(cursor, relay, 100).live
        assert len(claimed) == 4
        kept, refused = extend("default", relay, claimed)
        assert kept == {m.id for m in claimed} and refused == []
        settled = settle(cursor, relay, [DeliveryOutcome(m) for m in claimed], times=True)
    assert {s.id for s in settled} == {m.id for m in claimed}
    assert sql("SELECT DISTINCT status FROM outbox_message_t") == [(DeliveryStatus.DELIVERED,)]


def test_an_id_range_is_ordered_as_the_database_orders_uuids() -> None:
    ids = [uuid.uuid4() for _ in range(200)]
    low, high = sql(
        "SELECT (SELECT u FROM unnest(%s::uuid[]) u ORDER BY u LIMIT 1),"
        " (SELECT u FROM unnest(%s::uuid[]) u ORDER BY u DESC LIMIT 1)",
        [ids, ids],
    )[0]
    assert (min(ids), max(ids)) == (low, high)
    assert id_range(ids) == dict(zip(("low", "high"), whole_days(low, high), strict=True))


def test_whole_days_widen_a_range_to_the_days_of_its_ends() -> None:
    for low, high in [(uuid.uuid4(), uuid.uuid4()) for _ in range(50)]:
        low, high = min(low, high), max(low, high)
        first, last = whole_days(low, high)
        assert first <= low <= high <= last
        span = 86_400_000 << 80  # a day of ids
        assert first.int % span == 0
        assert (last.int + 1) % span == 0 or last.int == (1 << 128) - 1  # the last, cut day
        assert first.int // span == low.int // span and last.int // span == high.int // span
    top = uuid.UUID(int=(1 << 128) - 1)
    assert whole_days(top, top)[1] == top
    today_ = make_messages(1)[0]
    assert whole_days(today_, today_)[0] == bound(day_of(today_))


def test_a_claim_in_a_burst_newer_than_its_days_statistics_reads_about_its_batch() -> None:
    """Statistics taken before a burst: the burst's range of ids is past what ANALYZE saw.
    Named as it is, the range looked like a row or two, and each of the claim's probes
    walked every pending message of the day by id (up to 1.3 s a claim of 1,000 in a burst
    of 300,000 fired and delivered at once, until autovacuum analyzed the day); named as
    whole days, it does not look selective, and the claim reads its batch from the ready
    index."""
    away_from_midnight()
    earlier = make_messages(2000, age=2)
    day = partition(OUTBOX, day_of(earlier[0]))
    sql(f"ALTER TABLE {day} SET (autovacuum_enabled = false)")  # its statistics stay old
    try:
        read = burst_claim_reads(earlier)
    finally:
        sql(f"ALTER TABLE {day} RESET (autovacuum_enabled)")
    assert read < 2000, f"the claim of 100 read {read} rows of the outbox"


def burst_claim_reads(earlier: list[uuid.UUID]) -> int:
    """Rows of the outbox a claim of 100 reads, after ``earlier`` were analyzed and then
    delivered, and a burst of 20,000 written past them."""
    sql(f"ANALYZE {partition(OUTBOX, day_of(earlier[0]))}")
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now() WHERE id = ANY(%s)",
        [earlier],
    )
    make_messages(20_000, age=1)
    with connection.cursor() as cursor:
        ids = pending_ids(cursor)
    assert ids is not None
    params = {**claim_args(claimer(), 100), **ids}
    with transaction.atomic(), binding.cursor(connection) as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + CLAIM, params)
        (plan,) = cursor.fetchone()[0]
        transaction.set_rollback(True)
    return sum(
        node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        + node.get("Rows Removed by Filter", 0)
        for node in nodes(plan["Plan"])
        if node.get("Relation Name", "").startswith("outbox_message_t")
    )


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def away_from_midnight() -> None:
    """Wait, if need be, so that messages written in the next few seconds, up to a few seconds
    old, all fall in one day's partition (UTC)."""
    since = float(sql("SELECT mod(extract(epoch FROM now())::bigint, 86400)")[0][0])
    if since > DAY - 10 or since < 6:
        time.sleep((DAY - since + 6) % DAY)


def pending_range() -> tuple[uuid.UUID | None, uuid.UUID | None]:
    [(low, high)] = sql(f"SELECT low, high FROM {outbox_model.PENDING_IDS}()")
    return low, high


def test_the_pending_range_is_exact_to_the_day(history) -> None:
    away_from_midnight()
    assert pending_range() == (None, None)
    new = make_messages(3, age=1)
    make_messages(2, status=DeliveryStatus.DELIVERED)
    # All pending today: the first id of today, and the highest pending id.
    assert pending_range() == (bound(today()), new[-1])
    old = make_messages(2, age=PAST[1] * DAY)
    stray = make_messages(1, age=100 * DAY)  # no such day: the default partition
    # One on an earlier day: the lowest pending id itself.
    assert pending_range() == (min(old + stray), new[-1])
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now() WHERE id = ANY(%s)",
        [new + stray],
    )
    assert pending_range() == (bound(day_of(old[0])), old[-1])


def test_the_pending_range_reads_past_none_of_todays_deliveries() -> None:
    """A burst delivered in the order of its ids leaves, until VACUUM, an entry of each
    delivered message at the low end of the pending ids' index: the range does not read
    them (a probe from the low end reads them all)."""
    away_from_midnight()
    ids = make_messages(20_001, age=1)  # one statement: one day
    day = partition(OUTBOX, day_of(ids[-1]))
    sql(f"ALTER TABLE {day} SET (autovacuum_enabled = false)")  # the entries stay
    try:
        sql(
            "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now() WHERE id <> %s",
            [ids[-1]],
        )
        low_end = "SELECT o.id FROM outbox_message_t o WHERE o.status = 'PENDING'"
        low_end += " ORDER BY o.id LIMIT 1"
        assert pages_read(day, lambda: sql(low_end)) > 50  # what there is to walk
        assert pages_read(day, pending_range) <= 10
        assert pending_range() == (bound(day_of(ids[-1])), ids[-1])
    finally:
        sql(f"ALTER TABLE {day} RESET (autovacuum_enabled)")


def pages_read(table: str, read: Callable[[], object]) -> int:
    """Pages of ``table`` and its indexes that ``read()`` fetched (from the buffer pool or
    disk), whatever its plan: the counts of this backend not reported yet, read before and
    after within one transaction."""
    fetched = (
        "SELECT sum(pg_stat_get_xact_blocks_fetched(oid)) FROM pg_class"
        " WHERE oid = %(t)s::regclass"
        " OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(t)s::regclass)"
    )
    with transaction.atomic():
        [(before,)] = sql(fetched, {"t": table})
        read()
        [(after,)] = sql(fetched, {"t": table})
    return int(after - before)
