"""A backlog and on-time messages: does one tenant's backlog hold up another's deliveries?

    .venv/bin/python bench/relay_fairness_bench.py --backlog 1000000 --runs 3
    .venv/bin/python bench/relay_fairness_bench.py --backlog 100000 --runs 3 --compare
    .venv/bin/python bench/relay_fairness_bench.py claim --backlog 1000000 --runs 5

``drain`` (the default): tenant A has ``--backlog`` pending messages, claimable for a minute
(an endpoint that was down and recovers, a burst), and tenant B gets ``--rate`` new messages
a second, each claimable at once, for as long as A's backlog drains. One relay (the
``run_relay`` loop, in a thread of this process, batch ``--batch-size``) delivers both to a
no-op in-process handler. Per run it prints B's lag while A drains (``delivered_ts`` minus
``event_ts``: both database times, from the moment the message was written and claimable to
the moment its outcome was recorded; median, p99, max, and how many), and A's drain rate
(A's messages over the time between its first and last delivery). Messages are written as
a fire writes them: the payload once, in the event.

``claim``: ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim with ``--backlog`` of A's messages
claimable and a few of B's just claimable (the relay's previous claim a moment before):
execution time, buffers, rows read, the scans, and whether B's messages are all in the batch.

``--compare`` also runs, in the same run and alternating with the current claim, the claim
the relay had before (higher priority first, then the longest claimable, no on-time part;
its SQL is kept here), on the same data: the drain rate's ratio is what putting on-time work
first costs, the lag's is what it buys.

Runs against a ``dsched_relay_fairness_bench`` database (``$BENCH_DATABASE`` if set), on the
embedded PostgreSQL unless DATABASE_URL is set. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"  # no query log growing with the run

from plans import Plan, summarize
from setup_django import configure

configure(os.environ.get("BENCH_DATABASE", "dsched_relay_fairness_bench"))

import logging  # noqa: E402

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_dsched.handlers import registry  # noqa: E402
from django_dsched.outbox import claims  # noqa: E402
from django_dsched.outbox.messages import Claimer  # noqa: E402
from django_dsched.outbox.relay import Relay  # noqa: E402
from django_dsched.outbox.transports import Transports  # noqa: E402

logging.getLogger("django_dsched").setLevel(logging.WARNING)

TENANT_A = "00000000-0000-0000-0000-00000000000a"
TENANT_B = "00000000-0000-0000-0000-00000000000b"


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


# -- the previous claim, for --compare -------------------------------------------------------

CURRENT_CLAIM = claims.CLAIM


def previous_claim() -> str:
    """The claim before on-time work came first: per priority, the longest claimable first.
    Built from the current module's pieces (the payload, the UPDATE), so only the order
    differs; the message's own payload column is read only while it exists."""
    own_payload = sql(
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_name = 'outbox_message_t' AND column_name = 'payload'"
    )
    payload_column = ", o.payload" if own_payload else ""
    update = CURRENT_CLAIM[CURRENT_CLAIM.index("\nUPDATE outbox_message_t m\n") :]
    available = claims.AVAILABLE_TS
    return f"""
WITH {claims.PRIORITIES},
locked AS (
    SELECT x.*, octet_length(x.body) AS bytes
    FROM (SELECT c.id, c.priority, c.available_ts, {claims.PAYLOAD}::text AS body
          FROM levels l
          CROSS JOIN LATERAL (
              SELECT o.id, o.priority, {available} AS available_ts{payload_column}
              FROM outbox_message_t o
              WHERE o.status = %(pending)s AND o.priority = l.priority
                AND {available} <= statement_timestamp()
                AND {claims.TOPICS}
              ORDER BY {available}
              LIMIT %(limit)s
              FOR UPDATE OF o SKIP LOCKED
          ) c
          LIMIT %(limit)s) x
),
candidates AS (
    SELECT id, n, bytes
    FROM (SELECT id, bytes, row_number() OVER w AS n, sum(bytes) OVER w AS running
          FROM locked
          WINDOW w AS (ORDER BY priority DESC, available_ts, id ROWS UNBOUNDED PRECEDING)) s
    WHERE n = 1 OR %(max_bytes)s::bigint IS NULL OR running <= %(max_bytes)s::bigint
){update}"""


def use_code(code: str) -> None:
    """Make the relays of this process claim with ``code`` ("old" or "new")."""
    claims.CLAIMS[False, False] = previous_claim() if code == "old" else CURRENT_CLAIM


def codes_for(compare: bool, run: int) -> list[str]:
    if not compare:
        return ["new"]
    return ["old", "new"] if run % 2 == 0 else ["new", "old"]


# -- data --------------------------------------------------------------------------------------

# Events and their messages as a fire writes them with the payload stored once: the message
# has no payload of its own (its columns are left out, so this holds once they are gone).
INSERT = """
WITH events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
        event_type, event_ts, payload, metadata)
    SELECT g.id, %(host)s::uuid, g.id, 'Schedule', 1, %(topic)s || '.tick',
           statement_timestamp() - make_interval(secs => %(age)s) + g.n * interval '1 microsecond',
           jsonb_build_object('n', g.n, 'report', 'monthly'),
           jsonb_build_object('topic', %(topic)s)
    FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, %(count)s) AS n) g
    RETURNING id, host_id, aggregate_id, event_type, event_ts
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status)
SELECT id, host_id, aggregate_id, 'Schedule', 1, event_type, event_ts, %(topic)s, 'PENDING'
FROM events
"""


def insert(count: int, host: str, topic: str, age: float = 0.0) -> None:
    sql(INSERT, {"count": count, "host": host, "topic": topic, "age": age})


def prepare(backlog: int) -> None:
    """A's backlog, claimable for a minute (oldest first in its order of insertion)."""
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")
    started = time.monotonic()
    chunk = 100_000
    for offset in range(0, backlog, chunk):
        insert(min(chunk, backlog - offset), TENANT_A, "a", age=60.0)
    sql("VACUUM ANALYZE event_store_t")
    sql("VACUUM ANALYZE outbox_message_t")
    print(f"  {backlog:,} messages of tenant A claimable ({time.monotonic() - started:.0f} s)")


def noop(event: dict[str, Any]) -> None:
    pass


# -- drain -------------------------------------------------------------------------------------


def produce(rate: float, stop: threading.Event, sent: list[int]) -> None:
    """Tenant B's messages, ``rate`` a second, until ``stop`` (its own connection)."""
    try:
        period = 1.0 / rate
        next_at = time.monotonic()
        while not stop.is_set():
            insert(1, TENANT_B, "b")
            sql("SELECT pg_notify('dsched_outbox', '')")  # as the fire statement does
            sent[0] += 1
            next_at += period
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        connection.close()


def one_run(backlog: int, rate: float, batch_size: int) -> dict[str, float]:
    relay = Relay(
        instance_id="bench",
        batch_size=batch_size,
        transports=Transports({"*": {"BACKEND": "handlers", "HOSTS": "*"}}),  # both tenants
    )
    relay_thread = threading.Thread(target=relay.run)
    stop = threading.Event()
    sent = [0]
    producer = threading.Thread(target=produce, args=(rate, stop, sent))
    started = time.monotonic()
    relay_thread.start()
    producer.start()
    try:
        # A is drained once the relay delivered A's backlog and what B sent (B's go first).
        while relay.stats.delivered < backlog + sent[0] - 2 * rate:
            if time.monotonic() - started > 3600:
                raise SystemExit("the backlog did not drain within an hour")
            time.sleep(0.2)
        time.sleep(1.0)  # B's messages just after the drain count as during it
    finally:
        stop.set()
        producer.join(30)
        time.sleep(0.5)
        relay.stop()
        relay_thread.join(60)
    ((first, last, delivered),) = sql(
        "SELECT min(delivered_ts), max(delivered_ts), count(delivered_ts) FROM outbox_message_t"
        " WHERE topic = 'a'"
    )
    lags = sorted(
        float(row[0]) * 1000
        for row in sql(
            # B's messages written while A's backlog drained, delivered or not (yet).
            "SELECT extract(epoch FROM coalesce(delivered_ts, clock_timestamp()) - event_ts)"
            " FROM outbox_message_t WHERE topic = 'b' AND event_ts BETWEEN %s AND %s",
            [first, last],
        )
    )
    seconds = max((last - first).total_seconds(), 1e-6)
    nan = float("nan")
    return {
        "drain_per_s": delivered / seconds,
        "a_delivered": float(delivered),
        "b_lag_p50_ms": statistics.median(lags) if lags else nan,
        "b_lag_p99_ms": lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else nan,
        "b_lag_max_ms": lags[-1] if lags else nan,
        "b_messages": float(len(lags)),
        "load": os.getloadavg()[0],
    }


def drain(backlog: int, rate: float, batch_size: int, runs: int, compare: bool) -> None:
    registry.register(noop, topic="a", hosts=[TENANT_A])
    registry.register(noop, topic="b", hosts=[TENANT_B])
    results: dict[str, list[dict[str, float]]] = {}
    for run in range(runs):
        for code in codes_for(compare, run):
            use_code(code)
            prepare(backlog)
            result = one_run(backlog, rate, batch_size)
            results.setdefault(code, []).append(result)
            print(
                f"  run {run + 1} {code}: A drained at {result['drain_per_s']:,.0f} msg/s; "
                f"B lag p50 {result['b_lag_p50_ms']:.0f} ms, p99 {result['b_lag_p99_ms']:.0f} "
                f"ms, max {result['b_lag_max_ms']:.0f} ms ({result['b_messages']:.0f} messages); "
                f"load {result['load']:.1f}"
            )
    for code, rows in results.items():
        print(f"{code}: {backlog:,} of A's messages, B {rate:g}/s, batch {batch_size}")
        for key in rows[0]:
            values = [row[key] for row in rows]
            shown = ", ".join(f"{v:,.1f}" for v in values)
            print(f"  {key:<13} median {statistics.median(values):12,.1f}   runs: {shown}")
    if "old" in results:
        for key, better in (("drain_per_s", "new/old"), ("b_lag_p99_ms", "old/new")):
            old = statistics.median(row[key] for row in results["old"])
            new = statistics.median(row[key] for row in results["new"])
            ratio = new / old if better == "new/old" else old / new
            print(f"  {key}: {better} {ratio:.2f}x (medians)")
    use_code("new")


# -- claim: EXPLAIN (ANALYZE, BUFFERS) -----------------------------------------------------------


@dataclass
class ClaimPlan:
    plan: Plan
    b_first: bool  # every one of B's messages was claimed


def explain(params: dict[str, Any], b_ids: set[Any]) -> ClaimPlan:
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + claims.CLAIM, params)
            (raw,) = cursor.fetchone()
        finally:
            cursor.execute("ROLLBACK")
        cursor.execute("BEGIN")
        try:
            cursor.execute(claims.CLAIM, params)
            claimed = {row[0] for row in cursor.fetchall()}
        finally:
            cursor.execute("ROLLBACK")
    return ClaimPlan(summarize(raw), b_ids <= claimed)


def claim_cost(backlog: int, batch_size: int, runs: int, compare: bool) -> None:
    prepare(backlog)
    (since,) = sql("SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint")[0]
    insert(batch_size // 5, TENANT_B, "b")
    b_ids = {row[0] for row in sql("SELECT id FROM outbox_message_t WHERE topic = 'b'")}
    sql("ANALYZE outbox_message_t")
    params = claims.claim_args(Claimer("bench", 60.0, 10), batch_size, 8 * 1024 * 1024, since)
    with connection.cursor() as cursor:
        params.update(claims.pending_ids(cursor) or claims.ALL_IDS)  # as the relay reads it
    results: dict[str, list[ClaimPlan]] = {}
    for run in range(runs + 2):  # the first two warm the cache
        for code in codes_for(compare, run):
            use_code(code)
            plan = explain(params, b_ids)
            if run >= 2:
                results.setdefault(code, []).append(plan)
    for code, plans in results.items():
        print(
            f"claim {code}: median {statistics.median(p.plan.ms for p in plans):.2f} ms "
            f"(runs: {', '.join(f'{p.plan.ms:.2f}' for p in plans)}); buffers "
            f"{statistics.median(p.plan.buffers for p in plans):,.0f}, rows read "
            f"{statistics.median(p.plan.rows_read for p in plans):,.0f} ({plans[0].plan.scans}); "
            f"B's {len(b_ids)} all claimed: {all(p.b_first for p in plans)}; "
            f"batch {batch_size}, {backlog:,} of A's claimable"
        )
    use_code("new")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", nargs="?", choices=["drain", "claim"], default="drain")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=20.0, help="B's messages a second")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(
        f"PostgreSQL {connection.pg_version}, "  # type: ignore[attr-defined]
        f"{connection.settings_dict['NAME']}; "
        f"{claims.__file__}; load average {os.getloadavg()[0]:.1f}"
    )
    if args.what == "drain":
        drain(args.backlog, args.rate, args.batch_size, args.runs, args.compare)
    else:
        claim_cost(args.backlog, args.batch_size, args.runs, args.compare)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


if __name__ == "__main__":
    main()
