"""The claim statement on a real database: what it claims, in what order, what it reads.

The plan tests run ``EXPLAIN (ANALYZE, BUFFERS)`` on the claim and on the next-claimable query
with 30,000 messages waiting on a backoff or a live claim, and on the claim with 30,000
claimable messages of one tenant behind another's on-time ones, and assert on the plan's shape
and on the rows and buffers it read (never on time): a round must cost O(batch), however many
messages wait. 30,000 is 250 times what a claim of a batch of 50 may read: a plan that reads
the waiting messages (a sequential scan, a sort of the table, a range of the index read past
the batch) fails by far, as it did with ten times as many.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from django_dsched.checks.delivery import check_delivery_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.handlers import registry
from django_dsched.models import OutboxMessage, envelope
from django_dsched.outbox.claims import (
    ALL_IDS,
    CLAIM,
    NEXT_CLAIMABLE,
    backlog_share,
    claim,
    claim_batch,
    seconds_until_claimable,
)
from django_dsched.outbox.messages import Claimer, DeliveryOutcome
from django_dsched.outbox.refused import claim_narrowed
from django_dsched.outbox.relay import Relay
from django_dsched.outbox.settling import settle
from tests.helpers import other_session, sql
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.django_db(transaction=True)

WAITING = 30_000
BATCH = 50
TENANT_A = uuid.UUID(int=0xA)
TENANT_B = uuid.UUID(int=0xB)


def claimer(name: str = "r1", topics: list[str] | None = None) -> Claimer:
    return Claimer(name, visibility_timeout=30, max_attempts=5, topics=topics)


def claim_ids(limit: int = 100, max_bytes: int | None = None, **kwargs: Any) -> list[Any]:
    with connection.cursor() as cursor:
        live, dead = claim(cursor, claimer(**kwargs), limit, max_bytes)
    return [m.id for m in live + dead]


def back_off(ids: list[Any], seconds: float) -> None:
    """Put messages on a backoff that ends ``seconds`` from now (database clock)."""
    sql(
        "UPDATE outbox_message_t SET attempts = 1, last_error = 'down',"
        " next_attempt_ts = clock_timestamp() + make_interval(secs => %s) WHERE id = ANY(%s)",
        [seconds, ids],
    )


def hold(ids: list[Any], seconds: float, relay: str = "elsewhere") -> None:
    """Give messages a live claim of another relay, expiring ``seconds`` from now."""
    sql(
        "UPDATE outbox_message_t SET attempts = attempts + 1, claimed_by = %s,"
        " claimed_until = clock_timestamp() + make_interval(secs => %s) WHERE id = ANY(%s)",
        [relay, seconds, ids],
    )


# -- what a claim takes, and in what order -----------------------------------------------------


def test_waiting_messages_are_not_claimed_until_their_time() -> None:
    ready = make_messages(2, age=30)
    backed_off = make_messages(2, age=60)
    back_off(backed_off, 600)
    held = make_messages(2, age=90)
    hold(held, 600)
    expired = make_messages(1, age=120)
    hold(expired, -1)  # its relay died: claimable again

    # Claimable since its claim expired (1 s ago), after the others (30 s ago).
    assert claim_ids() == ready + expired


def test_higher_priorities_first_across_gaps_and_levels_with_only_waiting_rows() -> None:
    waiting_top = make_messages(3, priority=900, age=60)
    back_off(waiting_top, 600)
    low = make_messages(3, priority=-5, age=60)
    mid = make_messages(2, priority=7)
    high = make_messages(2, priority=40)
    default = make_messages(2, age=5)

    # One batch spans several priorities; the top one has nothing claimable.
    assert claim_ids(limit=5) == high + mid + default[:1]
    assert claim_ids(limit=100) == default[1:] + low


def test_claimable_since_orders_within_a_priority() -> None:
    """A retried message whose backoff ended queues behind messages claimable before it."""
    old = make_messages(1, age=120)
    back_off(old, -10)  # failed long ago, backoff ended 10 s ago
    fresh = make_messages(1, age=30)
    newer = make_messages(1, age=1)

    assert claim_ids() == fresh + old + newer


def test_topic_filter() -> None:
    make_messages(3, topic="a", priority=2)
    b_low = make_messages(2, topic="b")
    b_high = make_messages(1, topic="b", priority=2)
    c = make_messages(1, topic="c", priority=1)

    assert claim_ids(topics=["b", "c"]) == b_high + c + b_low


def test_a_claimed_message_leaves_the_claimable_range_until_its_claim_expires() -> None:
    (message_id,) = make_messages(1)
    assert claim_ids() == [message_id]
    assert claim_ids() == []
    hold([message_id], -1)
    assert claim_ids() == [message_id]


@pytest.fixture
def jit_seen() -> Iterator[None]:
    """``jit`` as each write of a claim saw it, in ``jit_seen`` (a trigger records it); the
    same trigger refuses to claim a message of topic ``poison`` (not to dead-letter it)."""
    sql("CREATE TABLE jit_seen (jit text)")
    sql(
        "CREATE FUNCTION jit_seen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.topic = 'poison' AND NEW.status = 'PENDING' THEN"
        " RAISE check_violation USING MESSAGE = 'poison'; END IF;"
        " INSERT INTO jit_seen VALUES (current_setting('jit')); RETURN NEW; END $$"
    )
    sql(
        "CREATE TRIGGER jit_seen BEFORE UPDATE ON outbox_message_t"
        " FOR EACH ROW EXECUTE FUNCTION jit_seen()"
    )
    try:
        yield
    finally:
        sql("DROP TRIGGER jit_seen ON outbox_message_t")
        sql("DROP FUNCTION jit_seen()")
        sql("DROP TABLE jit_seen")


@pytest.mark.usefixtures("jit_seen")
def test_a_claim_runs_without_jit_in_a_transaction_of_its_own() -> None:
    """The claim is planned above PostgreSQL's default ``jit_above_cost``, and compiling it
    took 1.6 s a claim on a stock server (bench/NOTES.md): it runs with ``jit`` off, set for
    its own transaction (the session keeps its setting), and so does the claim narrowed down
    to a row the database refuses."""
    (session_jit,) = sql("SELECT current_setting('jit')")
    ids = make_messages(2)
    assert claim_ids() == ids
    assert sql("SELECT jit FROM jit_seen") == [("off",), ("off",)]
    assert sql("SELECT current_setting('jit')") == [session_jit]

    sql("TRUNCATE jit_seen")
    poison = make_messages(1, topic="poison")
    fine = make_messages(1)
    narrowed, _ = claim_narrowed("default", claimer(), 10, None, None)
    assert [m.id for m in narrowed.live] == fine
    assert OutboxMessage.objects.get(id=poison[0]).status == DeliveryStatus.DELIVERY_FAILED
    assert sql("SELECT jit FROM jit_seen") == [("off",), ("off",)]  # the claim, the dead letter
    assert sql("SELECT current_setting('jit')") == [session_jit]


def test_seconds_until_claimable_looks_only_as_far_as_asked() -> None:
    assert seconds_until_claimable_now() is None
    soon = make_messages(1, topic="a")
    back_off(soon, 30)
    later = make_messages(1, topic="b")
    back_off(later, 10)
    hold(make_messages(1, topic="a"), 20)

    assert 8 < seconds_until_claimable_now() <= 10
    assert 18 < seconds_until_claimable_now(["a"]) <= 20
    assert seconds_until_claimable_now(["a"], within=15) is None
    assert seconds_until_claimable_now(["c"]) is None
    make_messages(1, topic="c", age=5)
    assert seconds_until_claimable_now(["c"]) <= 0


def seconds_until_claimable_now(
    topics: list[str] | None = None, within: float = 60
) -> float | None:
    with connection.cursor() as cursor:
        return seconds_until_claimable(cursor, topics, within=within)


# -- a backlog and on-time work -----------------------------------------------------------------


def now_us() -> int:
    """The database's time now, as a claim returns it (microseconds since the epoch)."""
    return int(sql("SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint")[0][0])


def claim_since(since_us: int | None, limit: int = 100, max_bytes: int | None = None) -> list[Any]:
    """The ids a claim takes, in order, for a relay whose previous claim was at ``since_us``."""
    with connection.cursor() as cursor:
        claimed = claim_batch(cursor, claimer(), limit, max_bytes, since_us=since_us)
    return [m.id for m in claimed.live + claimed.dead]


def test_on_time_messages_are_claimed_before_an_older_backlog() -> None:
    backlog = make_messages(3000, age=600, host_id=TENANT_A)
    since = now_us()
    on_time = make_messages(5, host_id=TENANT_B)

    assert claim_since(since) == on_time + backlog[:95]
    # The backlog fills the rest of each batch, oldest first.
    assert claim_since(now_us()) == backlog[95:195]


def test_the_first_claim_of_a_process_takes_what_became_claimable_within_its_window() -> None:
    backlog = make_messages(3000, age=600, host_id=TENANT_A)
    on_time = make_messages(5, host_id=TENANT_B)

    assert claim_ids(limit=10) == on_time + backlog[:5]


def test_the_backlog_keeps_a_share_while_on_time_work_fills_the_batch() -> None:
    backlog = make_messages(100, age=600, host_id=TENANT_A)
    since = now_us()
    on_time = make_messages(50, host_id=TENANT_B)

    # A tenth of the batch for the backlog, oldest first; on-time work takes the rest.
    assert claim_since(since, limit=20) == on_time[:18] + backlog[:2]
    assert backlog_share(20) == 2 and backlog_share(2) == 1 and backlog_share(1) == 0


def interleaved(*hosts: list) -> list:
    """Each host's first, then each one's second, ... (the backlog's order, host by host)."""
    return [m for turn in zip(*hosts, strict=True) for m in turn]


def test_a_batch_with_nothing_new_is_all_backlog_host_by_host() -> None:
    """Two tenants behind: each gets half the batch, its oldest first, whichever is older
    (oldest first across tenants made the younger backlog wait for the older's drain)."""
    older = make_messages(30, age=1200, host_id=TENANT_B)
    backlog = make_messages(30, age=600, host_id=TENANT_A)

    assert claim_since(now_us(), limit=40) == interleaved(backlog[:20], older[:20])
    assert claim_since(now_us(), limit=40) == interleaved(backlog[20:], older[20:])


def test_a_backlog_of_one_host_is_claimed_oldest_first() -> None:
    backlog = make_messages(30, age=600, host_id=TENANT_A)

    assert claim_since(now_us(), limit=20) == backlog[:20]
    assert claim_since(now_us(), limit=20) == backlog[20:]


def test_a_retry_whose_backoff_ends_and_an_expired_claim_are_on_time() -> None:
    """Due now: claimed before a backlog that was claimable earlier, however old they are.
    A retry whose backoff ended before the previous claim queues in its host's backlog by
    the end of its backoff."""
    backlog = make_messages(300, age=600, host_id=TENANT_A)
    retried, recovered, waited = make_messages(3, age=900, host_id=TENANT_B)
    back_off([waited], -60)  # its backoff ended a minute ago
    since = now_us()
    back_off([retried], 0)  # its backoff ends now
    hold([recovered], 0)  # the relay that held it died: its claim expires now

    # Then the backlog, host by host (five each: B has one), its oldest first.
    first = claim_since(since, limit=10)
    assert first == [retried, recovered, backlog[0], waited, *backlog[1:5]]
    assert claim_since(now_us(), limit=1000) == backlog[5:]


def test_a_message_committed_just_after_a_claim_is_on_time() -> None:
    """A message is claimable from its ``event_ts``, the time of the statement that wrote
    it, but visible only once its transaction commits: one committed just after a claim is
    on time at the next (``ON_TIME_WINDOW``), not in the backlog."""
    backlog = make_messages(300, age=600, host_id=TENANT_A)
    with other_session() as writer:
        sql("BEGIN", using=writer)
        late = make_messages(1, host_id=TENANT_B, using=writer)
        with connection.cursor() as cursor:
            claimed = claim_batch(cursor, claimer(), 10, since_us=now_us())
        sql("COMMIT", using=writer)
    assert [m.id for m in claimed.live] == backlog[:10]
    assert claimed.at_us is not None

    assert claim_since(claimed.at_us, limit=10) == late + backlog[10:19]


def test_a_byte_cap_keeps_the_backlogs_share() -> None:
    """The cap cuts the batch in an order that spreads the backlog's share among the
    on-time messages; the batch is delivered on time first."""
    backlog = make_large_messages(10, 20_000, age=600, host_id=TENANT_A)
    since = now_us()
    on_time = make_large_messages(10, 20_000, host_id=TENANT_B)
    one = payload_bytes(on_time[-1:])

    # Limit 10: nine on time, one backlog, cut in the order B A B B B …: five fit.
    assert claim_since(since, limit=10, max_bytes=5 * one + one // 2) == [
        *on_time[:4],
        backlog[0],
    ]


def test_priority_still_comes_first() -> None:
    high_backlog = make_messages(5, priority=5, age=600, host_id=TENANT_A)
    low_backlog = make_messages(5, age=900, host_id=TENANT_A)
    since = now_us()
    high_on_time = make_messages(3, priority=5, host_id=TENANT_B)
    low_on_time = make_messages(3, host_id=TENANT_B)

    # Within each priority on time first, then the backlog.
    assert claim_since(since, limit=10) == high_on_time + high_backlog + low_on_time[:2]
    # On time a full batch left over stays on time for the window (a second).
    assert claim_since(now_us(), limit=10) == [low_on_time[2], *low_backlog]


def test_a_priority_without_a_backlog_takes_the_whole_batch() -> None:
    """The backlog's share is kept only where there is a backlog: it never lets a lower
    priority's messages ahead of a higher one's."""
    low_backlog = make_messages(5, age=600, host_id=TENANT_A)
    since = now_us()
    high = make_messages(12, priority=5, host_id=TENANT_B)

    assert claim_since(since, limit=10) == high[:10]
    assert claim_since(since, limit=10) == high[10:] + low_backlog


# -- bytes ---------------------------------------------------------------------------------------


def make_large_messages(count: int, size: int, **kwargs: Any) -> list[Any]:
    ids = make_messages(count, **kwargs)
    sql(
        "UPDATE event_store_t"
        " SET payload = jsonb_set(payload, '{blob}', to_jsonb(repeat('x', %s)))"
        " WHERE id = ANY(%s)",
        [size, ids],
    )
    return ids


def payload_bytes(ids: list[Any]) -> int:
    """Bytes of the envelopes the relay delivers for ``ids`` (JSON text)."""
    return sql(
        f"SELECT coalesce(sum(octet_length({envelope.sql('e')}::text)), 0) FROM event_store_t e"
        " WHERE e.id = ANY(%s)",
        [ids],
    )[0][0]


def test_a_claim_holds_no_more_than_max_bytes_of_payload() -> None:
    ids = make_large_messages(10, 100_000)
    one = payload_bytes(ids[:1])
    cap = 3 * one + one // 2

    first = claim_ids(limit=100, max_bytes=cap)
    assert first == ids[:3]
    assert payload_bytes(first) <= cap
    assert claim_ids(limit=100, max_bytes=cap) == ids[3:6]
    # The count still caps too.
    assert claim_ids(limit=2, max_bytes=cap) == ids[6:8]


def test_a_message_larger_than_max_bytes_is_claimed_alone() -> None:
    ids = make_large_messages(3, 100_000)
    assert claim_ids(limit=100, max_bytes=1000) == ids[:1]
    assert claim_ids(limit=100, max_bytes=1000) == ids[1:2]


def test_relay_claims_by_bytes(settings: Any) -> None:
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}
    seen: list[str] = []

    def record(event: dict[str, Any]) -> None:
        seen.append(event["id"])

    registry.register(record, topic="reports")
    try:
        ids = make_large_messages(12, 50_000)
        # Three of the largest (envelopes differ by a byte or two: their times' digits).
        settings.DSCHED_RELAY_BATCH_BYTES = 3 * max(payload_bytes([i]) for i in ids)
        relay = Relay(instance_id="r1", batch_size=100)
        assert relay.run_until_idle() == 12
    finally:
        registry.unregister(record, topic="reports")
    assert seen == [str(i) for i in ids]
    assert relay.stats.batches == 4  # 3 messages a batch, not all 12 in one
    assert OutboxMessage.objects.filter(status=DeliveryStatus.DELIVERED).count() == 12


def test_a_relay_asks_for_no_more_rows_than_the_byte_cap_takes(settings: Any) -> None:
    """The claim reads every row it asks for to count bytes: after a claim of large messages
    a relay with a big batch size asks for about what the cap keeps, not the batch size."""
    settings.DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers"}}

    def ignore(event: dict[str, Any]) -> None:
        pass

    registry.register(ignore, topic="reports")
    try:
        ids = make_large_messages(20, 50_000)
        size = max(payload_bytes([i]) for i in ids)
        relay = Relay(instance_id="r1", batch_size=1000, batch_bytes=3 * size)
        assert relay.claim_limit() == 1000  # nothing known yet
        with connection.cursor() as cursor:
            live, _ = claim(cursor, relay.claimer, relay.claim_limit(), relay.batch_bytes)
        assert len(live) == 3 and all(m.size == payload_bytes([m.id]) for m in live)
        relay.step()
        assert relay.claim_limit() == 4  # 3 fit: a quarter to spare, plus one
        OutboxMessage.objects.filter(id__in=ids).delete()
        small = payload_bytes(make_messages(1))  # then a small one: ask for many again
        relay.step()
        assert relay.claim_limit() == int(3 * size / small * 1.25) + 1 > 400
    finally:
        relay.shutdown()
        registry.unregister(ignore, topic="reports")


@pytest.mark.parametrize("value", [0, -1, "8MiB", 1.5, True])
def test_batch_bytes_must_be_a_positive_whole_number(settings: Any, value: object) -> None:
    settings.DSCHED_RELAY_BATCH_BYTES = value
    assert "dsched.E008" in [e.id for e in check_delivery_settings()]


# -- what a claim reads: EXPLAIN (ANALYZE, BUFFERS) --------------------------------------------


def explain(query: str, params: dict[str, Any]) -> dict[str, Any]:
    """The executed plan of ``query`` (as JSON), its writes rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params)
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def outbox_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's scans of outbox_message_t's partitions (a day's, or the default one)."""
    return [
        n
        for n in nodes(plan["Plan"])
        if n.get("Relation Name", "").startswith("outbox_message_t")
        and n["Node Type"] != "ModifyTable"
    ]


def parent_index(name: str) -> str:
    """The partitioned index (of outbox_message_t) a partition's index belongs to."""
    rows = sql(
        "SELECT p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent WHERE c.relname = %s",
        [name],
    )
    return rows[0][0] if rows else name


def rows_read(scan: dict[str, Any]) -> int:
    """Rows (or index entries) a scan node produced or threw away, over all its loops."""
    per_loop = (
        scan["Actual Rows"]
        + scan.get("Rows Removed by Filter", 0)
        + scan.get("Rows Removed by Index Recheck", 0)
    )
    return per_loop * scan["Actual Loops"]


def buffers(plan: dict[str, Any]) -> int:
    top = plan["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def params(**extra: Any) -> dict[str, Any]:
    return {
        "pending": DeliveryStatus.PENDING.value,
        "dead": DeliveryStatus.DELIVERY_FAILED.value,
        "relay": "r1",
        "visibility": 30.0,
        "max_attempts": 5,
        "topics": None,
        "limit": BATCH,
        "max_bytes": 8 * 1024 * 1024,
        "within": 2.0,
        "since": None,
        "window": 1.0,
        "share": backlog_share(BATCH),
        "on_time": BATCH - backlog_share(BATCH),
        "rotate": 0,
        "held": [],
        **ALL_IDS,
        **extra,
    }


def add_waiting_messages(count: int) -> None:
    """``count`` pending messages that are not claimable: on a backoff (the oldest ones, at
    the default priority and above it) or held by a live claim."""
    sql(
        """
        INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
            aggregate_version, event_type, event_ts, topic, status, priority, attempts,
            last_error, next_attempt_ts, claimed_by, claimed_until)
        SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000', gen_random_uuid(),
               'Schedule', 1, 'report.build',
               statement_timestamp() - interval '1 hour' + n * interval '1 microsecond',
               'reports', 'PENDING',
               CASE WHEN n %% 3 = 0 THEN 5 ELSE 0 END, 1, 'down',
               CASE WHEN n %% 10 <> 0
                    THEN statement_timestamp() + interval '1 hour' + (n %% 600) * interval '1s'
               END,
               CASE WHEN n %% 10 = 0 THEN 'elsewhere' ELSE '' END,
               CASE WHEN n %% 10 = 0 THEN statement_timestamp() + interval '1 minute' END
        FROM generate_series(1, %s) AS n
        """,
        [count],
    )
    sql("ANALYZE outbox_message_t")


# Rows and buffers a claim may read per partition of outbox_message_t, over the batch's: the
# Merge Append of each range reads one row ahead in every partition, and each probe (of a
# priority, of a range's end) two or three index pages of each.
PER_PARTITION_ROWS = 2
PER_PARTITION_BUFFERS = 12


def outbox_partitions() -> int:
    return int(
        sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_message_t'::regclass")[0][0]
    )


def assert_reads_o_of_batch(
    plan: dict[str, Any], what: str, max_rows: int, max_buffers: int
) -> None:
    # A partition the plan never entered (the update's scan of a day no claimed row is in)
    # reads nothing, whatever its plan.
    scans = [s for s in outbox_scans(plan) if s["Actual Loops"]]
    shape = [(s["Node Type"], s.get("Index Name")) for s in scans]
    assert scans, f"{what}: no scan of outbox_message_t in {shape}"
    # Index scans, or a bitmap scan of the primary key (the claimed rows, by their ids).
    other = [
        (s["Node Type"], s.get("Relation Name"), rows_read(s), s.get("Shared Hit Blocks"))
        for s in scans
        if s["Node Type"] not in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan")
    ]
    assert not other, (what, other)
    # Each probe of the ready index looks into every partition (a day's, or the default): a
    # row or two and a few buffers each, however many rows the partition holds.
    partitions = outbox_partitions()
    read = sum(rows_read(s) for s in scans)
    allowed_rows = max_rows + PER_PARTITION_ROWS * partitions
    assert read <= allowed_rows, f"{what} read {read} rows with {WAITING} waiting: {shape}"
    allowed = max_buffers + PER_PARTITION_BUFFERS * partitions
    assert buffers(plan) <= allowed, f"{what} touched {buffers(plan)} buffers"
    indexes = {
        parent_index(
            s.get("Index Name") or next(c["Index Name"] for c in nodes(s) if "Index Name" in c)
        )
        for s in scans
    }
    # The priorities' skip scan may probe either ready index (both lead with the priority);
    # the backlog's hosts are a skip scan of the host ready index.
    ready = {"dsched_outbox_ready_idx", "dsched_outbox_host_ready_idx"}
    assert indexes <= {*ready, "outbox_message_t_pkey"}, (what, shape)
    # Anything sorted is the batch itself (the byte cap's running sum), never the table.
    sorted_rows = [n["Actual Rows"] for n in nodes(plan["Plan"]) if n["Node Type"] == "Sort"]
    assert all(rows <= BATCH for rows in sorted_rows), (what, sorted_rows)


def test_an_idle_relay_asks_when_next_without_reading_the_waiting_messages() -> None:
    add_waiting_messages(WAITING)  # nothing is claimable

    for topics in (None, ["reports"]):
        plan = explain(NEXT_CLAIMABLE, params(topics=topics))
        # One probe per priority present (two here), each reading at most one row.
        assert_reads_o_of_batch(plan, f"next claimable {topics}", max_rows=10, max_buffers=50)


def test_a_claim_reads_o_of_batch_rows_however_many_messages_wait() -> None:
    add_waiting_messages(WAITING)
    make_messages(2 * BATCH, age=60)  # claimable, younger than the waiting ones
    sql("ANALYZE outbox_message_t")

    for topics in (None, ["reports"]):
        plan = explain(CLAIM, params(topics=topics))
        assert plan["Plan"]["Actual Rows"] == BATCH
        # Per claimed row: its index entry (locked), then its update by primary key; plus
        # the priority probes. Buffers: those reads, the heap updates and their index entries.
        assert_reads_o_of_batch(
            plan, f"claim {topics}", max_rows=2 * BATCH + 10, max_buffers=40 * BATCH
        )


def test_a_claim_reads_o_of_batch_rows_however_large_the_backlog() -> None:
    """Tenant A's 30,000 claimable messages, an hour old, and tenant B's few, just
    claimable: the claim takes B's first, reading two ranges of the ready index per priority
    (on time, then the backlog) and O(batch) rows, never the backlog beyond the batch."""
    add_waiting_messages(WAITING // 3)  # and some on a backoff or a claim, at two priorities
    backlog = make_messages(WAITING, age=3600, host_id=TENANT_A)
    sql("ANALYZE outbox_message_t")
    since = now_us()
    on_time = make_messages(BATCH // 5, host_id=TENANT_B)

    for topics in (None, ["reports"]):
        for since_us, window in ((since, 1.0), (None, 600.0)):  # the first claim: a window
            what = f"claim {topics} since={since_us} window={window}"
            plan = explain(CLAIM, params(topics=topics, since=since_us, window=window))
            assert plan["Plan"]["Actual Rows"] == BATCH, what
            # Per claimed row: its index entry (locked), then its update by primary key; plus
            # per priority its probe, the two ranges' ends, and B's few read once more (are
            # they more than the batch less the backlog's share?), and per host with pending
            # messages there a probe of the host ready index and of its backlog's first row.
            assert_reads_o_of_batch(plan, what, max_rows=2 * BATCH + 20, max_buffers=40 * BATCH)
    # On-time messages enough to fill the batch: the claim reads past the batch less the
    # backlog's share of them once more, to know it must keep that share.
    crowded = make_messages(BATCH, host_id=TENANT_B)
    plan = explain(CLAIM, params(since=since))
    assert_reads_o_of_batch(plan, "crowded", max_rows=3 * BATCH + 20, max_buffers=40 * BATCH)
    share = backlog_share(BATCH)
    assert claim_since(since, limit=BATCH) == (on_time + crowded)[: BATCH - share] + backlog[:share]


@pytest.mark.parametrize("size", [20_000, WAITING])
def test_a_settle_of_a_large_batch_reads_each_outcomes_row_once(size: int) -> None:
    """Settles of 1,000 outcomes find each row once, whatever the column statistics say.

    ANALYZE sees ``claimed_by = ''`` in every row, so a fence written with the relay's id as
    a constant read as "one row": once the table had grown by the first settles' row
    versions, the planner joined a sequential scan to the outcomes in a nested loop,
    comparing every outcome with every claimed row (a million comparisons, 200 ms a settle
    of 1,000 on a table of 20,000 messages)."""
    make_messages(size, age=3600)
    sql("ANALYZE outbox_message_t")  # claimed_by is '' everywhere
    captured: dict[str, Any] = {}

    class Capture:
        def execute(self, query: str, params: dict[str, Any]) -> None:
            captured.update(query=query, params=params)

        def fetchall(self) -> list[Any]:
            return []

    for round_ in range(4):
        with connection.cursor() as cursor:
            live, _ = claim(cursor, claimer(), 1000)
        outcomes = [DeliveryOutcome(m) for m in live]
        settle(Capture(), claimer(), outcomes, times=True)  # every row returned
        plan = explain(captured["query"], captured["params"])
        assert plan["Plan"]["Actual Rows"] == 1000
        compared = sum(
            n.get("Rows Removed by Join Filter", 0) * n.get("Actual Loops", 1)
            for n in nodes(plan["Plan"])
        )
        assert compared <= 1000, f"round {round_}: {compared} rows compared and thrown away"
        # Each row found once: by its primary key, or in one pass over the table.
        for scan in outbox_scans(plan):
            assert scan["Actual Loops"] <= 1 or (
                "Index Name" in scan and parent_index(scan["Index Name"]) == "outbox_message_t_pkey"
            )
        with connection.cursor() as cursor:
            assert len(settle(cursor, claimer(), outcomes, times=True)) == 1000
