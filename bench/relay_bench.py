"""Benchmark of the outbox relay: throughput, fire-to-delivery latency, claim cost, memory.

    .venv/bin/python bench/relay_bench.py                       # throughput and latency
    .venv/bin/python bench/relay_bench.py throughput --messages 20000 --runs 5   # and the ceiling
    .venv/bin/python bench/relay_bench.py throughput --waiting 1000000 --compare --runs 5
    .venv/bin/python bench/relay_bench.py latency --schedules 200 --seconds 20 --runs 5
    .venv/bin/python bench/relay_bench.py claim --waiting 1000000 --runs 11
    .venv/bin/python bench/relay_bench.py fire-insert --runs 10
    .venv/bin/python bench/relay_bench.py memory --messages 3000 --batch-size 1000 --compare

``throughput``: a backlog of pending messages is drained by one relay (the ``Relay`` loop of
``run_relay``, in this process) to the in-process handler transport (a no-op handler) and to
Redis Streams (a redis-server started here on a free port); prints messages per second, then
the hand-written ceiling's on as many messages (``bench/pipeline_bench.py`` says what it is,
and measures the relay against the scheduler in the same run).

``latency``: a real ``run_scheduler`` process fires schedules every second while one relay
delivers them; prints p50/p99 of ``delivered_ts - event_ts`` (both database times: the fire
statement's time and the time the delivery was recorded, so the figure includes sending and
recording).

``claim``: ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim of a batch (and of the idle relay's
next-claimable query) with ``--waiting`` messages on a backoff: execution time, buffers and
rows read, for the claim before and after the ready index, side by side in the same run.

``fire-insert``: what the ready index costs the fire path: the fire statement's outbox insert
(1,000 rows a statement) with the previous claim index and with the ready index, alternating.

``memory``: peak RSS (``VmHWM``) of a relay process delivering a backlog of events of
``--payload-kib`` KiB each (an ``event_data`` of many small objects, as a report or an order
export would be: the worst case for Python's memory per byte of JSON).

``--waiting N`` first adds N pending messages that wait on a backoff (a day ahead, older than
the backlog, at the same priority: the case that made the previous claim read them all).
``--compare`` also runs, in the same run and alternating with the current code, the claim the
relay had before (its SQL and its index ``dsched_outbox_claim_idx``, no byte cap), so the
ratio old/new holds on a shared, noisy machine.

Runs against a ``dsched_relay_bench`` database (on the embedded PostgreSQL unless
DATABASE_URL is set). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

if len(sys.argv) > 1 and sys.argv[1] == "relay-process":
    os.environ["DEBUG"] = "False"  # a production relay: no query log in the memory figure

from plans import Plan, summarize
from redis_server import redis_server
from setup_django import ROOT, configure

URL = configure("dsched_relay_bench")

import logging  # noqa: E402

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from relay_ceiling import CEILING_CLAIM, CEILING_SETTLE  # noqa: E402 (needs Django set up)

from django_dsched.enums import DeliveryStatus  # noqa: E402
from django_dsched.handlers import registry  # noqa: E402
from django_dsched.outbox import claims, relay  # noqa: E402
from django_dsched.outbox.messages import Claimer, Message  # noqa: E402
from django_dsched.outbox.relay import Relay  # noqa: E402
from django_dsched.outbox.transports import Transports  # noqa: E402

logging.getLogger("django_dsched").setLevel(logging.WARNING)

TOPIC = "bench"
WAITING_ERROR = "bench: waiting on a backoff"


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]] | None:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def scalar(query: str, params: Any = None) -> Any:
    rows = sql(query, params)
    assert rows
    return rows[0][0]


# -- the claim before the ready index (the previous outbox/claims.py), for --compare -------------

OLD_CLAIM = """
WITH candidates AS (
    SELECT id
    FROM outbox_message_t
    WHERE status = %(pending)s
      AND (next_attempt_ts IS NULL OR next_attempt_ts <= statement_timestamp())
      AND (claimed_until IS NULL OR claimed_until < statement_timestamp())
      AND (%(topics)s::text[] IS NULL OR topic = ANY(%(topics)s::text[]))
    ORDER BY priority DESC, event_ts
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_message_t m
SET attempts = CASE WHEN m.attempts >= %(max_attempts)s THEN m.attempts ELSE m.attempts + 1 END,
    claimed_by = CASE WHEN m.attempts >= %(max_attempts)s THEN '' ELSE %(relay)s END,
    claimed_until = CASE WHEN m.attempts >= %(max_attempts)s THEN NULL
                         ELSE clock_timestamp() + make_interval(secs => %(visibility)s) END,
    status = CASE WHEN m.attempts >= %(max_attempts)s THEN %(dead)s ELSE m.status END,
    last_error = CASE WHEN m.attempts >= %(max_attempts)s
                      THEN 'claimed ' || m.attempts || ' times without a recorded outcome'
                           || ' (the relays holding it died or hung). Last error: '
                           || m.last_error
                      ELSE m.last_error END
FROM candidates c
WHERE m.id = c.id
RETURNING m.id, m.topic, m.event_type,
          -- The payload as today's claim reads it: its event's (the message has none).
          (SELECT e.payload FROM event_store_t e WHERE e.id = m.id),
          m.attempts, m.priority, m.event_ts, m.status
"""

OLD_NEXT_CLAIMABLE = """
SELECT extract(epoch FROM min(GREATEST(next_attempt_ts, claimed_until, statement_timestamp()))
                      - clock_timestamp())
FROM outbox_message_t
WHERE status = %(pending)s
  AND (%(topics)s::text[] IS NULL OR topic = ANY(%(topics)s::text[]))
"""


def old_claim(
    cursor: Any, claimer: Claimer, limit: int, max_bytes: int | None = None
) -> tuple[list[Message], list[Message]]:
    """The previous claim: no byte cap, reads every pending row ahead of the batch."""
    cursor.execute(OLD_CLAIM, {**claim_params(limit), "relay": claimer.relay_id})
    live: list[Message] = []
    dead: list[Message] = []
    for id_, topic, event_type, payload, attempts, priority, _, status in sorted(
        cursor.fetchall(), key=lambda row: (-row[5], row[6], row[0])
    ):
        if isinstance(payload, str | bytes):
            payload = json.loads(payload)
        message = Message(id_, topic, event_type, payload, attempts, priority)
        (live if status == DeliveryStatus.PENDING else dead).append(message)
    return live, dead


def old_seconds_until_claimable(
    cursor: Any, topics: Sequence[str] | None = None, *, within: float = 0.0
) -> float | None:
    cursor.execute(OLD_NEXT_CLAIMABLE, {"pending": "PENDING", "topics": topics or None})
    (delay,) = cursor.fetchone()
    return None if delay is None else float(delay)


INDEXES = {
    "old": (
        "dsched_outbox_claim_idx",
        "CREATE INDEX dsched_outbox_claim_idx ON outbox_message_t (priority DESC, event_ts)"
        " WHERE status = 'PENDING'",
    ),
    "new": (
        "dsched_outbox_ready_idx",
        "CREATE INDEX dsched_outbox_ready_idx ON outbox_message_t"
        " (priority DESC, (GREATEST(event_ts, next_attempt_ts, claimed_until)))"
        " WHERE status = 'PENDING'",
    ),
}


def old_claim_batch(
    cursor: Any,
    claimer: Claimer,
    limit: int,
    max_bytes: int | None = None,
    *,
    since_us: int | None = None,
    window: float = 1.0,
) -> claims.Claimed:
    """The previous claim where the relay calls ``claim_batch`` (no on-time part)."""
    live, dead = old_claim(cursor, claimer, limit, max_bytes)
    return claims.Claimed(live, dead)


NEW_FUNCTIONS = (claims.claim_batch, claims.seconds_until_claimable)
OLD_FUNCTIONS = (old_claim_batch, old_seconds_until_claimable)


def use_code(code: str, *, both_indexes: bool = False) -> None:
    """Make the relay in this process run ``code`` ("old" or "new"), with only its index."""
    relay.claim_batch, relay.seconds_until_claimable = (  # type: ignore[assignment]
        OLD_FUNCTIONS if code == "old" else NEW_FUNCTIONS
    )
    for name, (index, ddl) in INDEXES.items():
        exists = scalar("SELECT count(*) FROM pg_class WHERE relname = %s", [index])
        if (name == code or both_indexes) and not exists:
            sql(ddl)
        elif name != code and not both_indexes and exists:
            sql(f"DROP INDEX {index}")
    sql("ANALYZE outbox_message_t")


def claim_params(limit: int, **extra: Any) -> dict[str, Any]:
    return {
        "pending": "PENDING",
        "dead": "DELIVERY_FAILED",
        "relay": "bench",
        "visibility": 60.0,
        "max_attempts": 10,
        "topics": None,
        "limit": limit,
        "max_bytes": 8 * 1024 * 1024,
        "within": 2.0,
        # The claim's on-time part: a first claim (everything claimable within the last
        # second is on time), its share of the batch as a relay asks for it.
        "since": None,
        "window": 1.0,
        "share": claims.backlog_share(limit),
        "on_time": limit - claims.backlog_share(limit),
        **claims.ALL_IDS,
        **extra,
    }


# -- data ----------------------------------------------------------------------------------------


def reset() -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


def clear_all_but_waiting() -> None:
    """Remove everything except the waiting messages, and vacuum what that left behind."""
    sql("TRUNCATE schedule_t, event_store_t, scheduler_lock_t")
    sql("DELETE FROM outbox_message_t WHERE last_error <> %s", [WAITING_ERROR])
    sql("VACUUM ANALYZE outbox_message_t")


def ensure_waiting(count: int) -> None:
    """Exactly ``count`` messages waiting on a backoff (kept between runs)."""
    have = scalar("SELECT count(*) FROM outbox_message_t WHERE last_error = %s", [WAITING_ERROR])
    if have == count:
        return
    reset()
    started = time.monotonic()
    chunk = 250_000
    for offset in range(0, count, chunk):
        sql(
            """
            INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, topic, status, attempts, last_error,
                next_attempt_ts)
            SELECT g.id, '00000000-0000-0000-0000-000000000000', g.id, 'Schedule', 1,
                   'bench.tick',
                   statement_timestamp() - interval '1 day' + g.n * interval '1 microsecond',
                   %s, 'PENDING', 3, %s,
                   statement_timestamp() + interval '1 day' + (g.n %% 3600) * interval '1 s'
            FROM (SELECT gen_random_uuid() AS id, n
                  FROM generate_series(%s + 1, %s) AS n) g
            """,
            [TOPIC, WAITING_ERROR, offset, min(count, offset + chunk)],
        )
    sql("VACUUM ANALYZE outbox_message_t")
    elapsed = time.monotonic() - started
    print(f"  {count:,} messages waiting on a backoff (inserted in {elapsed:.0f} s)")


def insert_pending(count: int, payload_kib: int = 0) -> None:
    """``count`` claimable messages with their events, oldest first (all in the past:
    claimable at once), as a fire writes them: the payload and metadata in the event."""
    data = (
        "jsonb_build_object('n', g.n, 'report', 'monthly')"
        if not payload_kib
        else "jsonb_build_object('n', g.n, 'rows', (SELECT rows FROM big))"
    )
    sql(
        f"""
        WITH big AS (
            -- About payload_kib KiB of JSON text: objects of ~80 bytes, as in an export.
            SELECT jsonb_agg(jsonb_build_object('id', i, 'sku', 'SKU-' || lpad(i::text, 6, '0'),
                                                'qty', i %% 7, 'price', 19.99,
                                                'tags', jsonb_build_array('a', 'b'))) AS rows
            FROM generate_series(1, %s) AS i
        )
        , events AS (
            INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, payload, metadata)
            SELECT g.id, '00000000-0000-0000-0000-000000000000', g.id, 'Schedule', 1,
                   'bench.tick',
                   statement_timestamp() - interval '1 minute' + g.n * interval '1 microsecond',
                   jsonb_build_object('specversion', '1.0', 'id', g.id, 'type', 'bench.tick',
                                      'source', '/django-dsched/bench', 'topic', %s,
                                      'time', statement_timestamp(),
                                      'datacontenttype', 'application/json',
                                      'data', {data}),
                   '{{}}'::jsonb
            FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, %s) AS n) g
            RETURNING id, host_id, aggregate_id, event_type, event_ts
        )
        INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
            aggregate_version, event_type, event_ts, topic, status)
        SELECT id, host_id, aggregate_id, 'Schedule', 1, event_type, event_ts, %s, 'PENDING'
        FROM events
        """,
        [max(1, payload_kib * 1024 // 80), TOPIC, count, TOPIC],
    )
    sql("ANALYZE event_store_t")
    sql("ANALYZE outbox_message_t")


def noop(event: dict[str, Any]) -> None:
    pass


def transports_for(kind: str, redis_url: str | None) -> dict[str, Any]:
    if kind == "redis":
        return {"*": {"BACKEND": "redis", "OPTIONS": {"URL": redis_url, "MAXLEN": 100_000}}}
    return {"*": {"BACKEND": "handlers"}}


def codes_for(compare: bool, run: int) -> list[str]:
    """The code(s) to measure in this run; with --compare, alternating which goes first."""
    if not compare:
        return ["new"]
    return ["old", "new"] if run % 2 == 0 else ["new", "old"]


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return (
        f"median {fmt.format(statistics.median(values))} "
        f"(runs: {', '.join(fmt.format(v) for v in values)})"
    )


def ratio_line(what: str, results: dict[str, list[float]], higher_is_better: bool) -> None:
    """How many times better the new code did: new/old for rates, old/new for costs."""
    if "old" not in results:
        return
    old, new = results["old"], results["new"]
    better = [n / o if higher_is_better else o / n for o, n in zip(old, new, strict=True)]
    label = "new/old" if higher_is_better else "old/new"
    median_ratio = (
        statistics.median(new) / statistics.median(old)
        if higher_is_better
        else statistics.median(old) / statistics.median(new)
    )
    print(
        f"  {what}: {label} {median_ratio:.2f}x (medians); per run "
        f"{', '.join(f'{r:.2f}x' for r in better)}"
    )


# -- throughput ----------------------------------------------------------------------------------


def throughput(messages: int, runs: int, batch_size: int, waiting: int, compare: bool) -> None:
    """Messages/s of one relay draining a backlog."""
    registry.register(noop, topic=TOPIC)
    ensure_waiting(waiting)
    with redis_server() as redis_url:
        for kind in ("handlers", "redis"):
            rates: dict[str, list[float]] = {}
            for run in range(runs):
                for code in codes_for(compare, run):
                    use_code(code)
                    clear_all_but_waiting()
                    insert_pending(messages)
                    relay_ = Relay(
                        instance_id="bench",
                        batch_size=batch_size,
                        transports=Transports(transports_for(kind, redis_url)),
                    )
                    started = time.perf_counter()
                    delivered = relay_.run_until_idle()
                    elapsed = time.perf_counter() - started
                    assert delivered == messages, (delivered, messages)
                    rates.setdefault(code, []).append(messages / elapsed)
            for code, values in rates.items():
                print(
                    f"throughput {kind:8s} {code}: {spread(values)} msg/s "
                    f"({messages:,} messages, batch {batch_size}, {waiting:,} waiting)"
                )
            ratio_line(f"throughput {kind}", rates, higher_is_better=True)
        ceilings = []
        for _ in range(runs):
            clear_all_but_waiting()
            insert_pending(messages)
            started = time.perf_counter()
            ceiling(batch_size)
            ceilings.append(messages / (time.perf_counter() - started))
        print(
            f"throughput ceiling: {spread(ceilings)} msg/s (hand-written: one claiming UPDATE,"
            f" a no-op, one UPDATE marking the batch delivered; batch {batch_size};"
            " bench/pipeline_bench.py)"
        )
    use_code("new")
    clear_all_but_waiting()


def noop_text(payload: str) -> None:
    pass


def ceiling(batch_size: int) -> None:
    """The least a relay does per batch, by hand (as in bench/pipeline_bench.py)."""
    import psycopg

    with psycopg.connect(URL, autocommit=True) as conn, conn.cursor() as cur:
        while rows := cur.execute(CEILING_CLAIM, [batch_size]).fetchall():
            for _, payload in rows:
                noop_text(payload)
            cur.execute(CEILING_SETTLE, [[id_ for id_, _ in rows]], binary=True)


# -- latency -------------------------------------------------------------------------------------


def latency(schedules: int, seconds: int, runs: int, waiting: int, compare: bool) -> None:
    registry.register(noop, topic=TOPIC)
    ensure_waiting(waiting)
    with redis_server() as redis_url:
        for kind in ("handlers", "redis"):
            p50s: dict[str, list[float]] = {}
            p99s: dict[str, list[float]] = {}
            for run in range(runs):
                for code in codes_for(compare, run):
                    use_code(code)
                    clear_all_but_waiting()
                    p50, p99, count = latency_run(kind, redis_url, schedules, seconds)
                    p50s.setdefault(code, []).append(p50)
                    p99s.setdefault(code, []).append(p99)
                    print(
                        f"  run {run + 1} {kind} {code}: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
                        f"({count} deliveries)"
                    )
            for code in p50s:
                print(
                    f"latency    {kind:8s} {code}: fire to delivery p50 "
                    f"{spread(p50s[code], '{:.1f}')} ms, p99 {spread(p99s[code], '{:.1f}')} ms "
                    f"({schedules} schedules every 1 s for {seconds} s, {waiting:,} waiting)"
                )
            ratio_line(f"latency p50 {kind}", p50s, higher_is_better=False)
            ratio_line(f"latency p99 {kind}", p99s, higher_is_better=False)
    use_code("new")
    clear_all_but_waiting()


def latency_run(
    kind: str, redis_url: str, schedules: int, seconds: int
) -> tuple[float, float, int]:
    sql(
        """
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic,
            event_type, event_data)
        SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000000',
               'bench-' || i, 'SECONDS', 1, date_trunc('second', now()) + interval '2s',
               date_trunc('second', now()) + interval '2s',
               date_trunc('second', now()) + interval '2s',
               %s, 'bench.tick', jsonb_build_object('n', i)
        FROM generate_series(1, %s) AS i
        """,
        [TOPIC, schedules],
    )
    relay_ = Relay(instance_id="bench", transports=Transports(transports_for(kind, redis_url)))
    thread = threading.Thread(target=relay_.run)
    thread.start()
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "django", "run_scheduler", "-v", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        time.sleep(seconds + 2)
    finally:
        scheduler.terminate()
        scheduler.wait(30)
        relay_.stop()
        thread.join(60)
    rows = sql(
        "SELECT extract(epoch FROM delivered_ts - event_ts) FROM outbox_message_t"
        " WHERE status = 'DELIVERED'"
    )
    lags = sorted(float(row[0]) * 1000 for row in rows or [])
    if not lags:
        return float("nan"), float("nan"), 0
    return lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))], len(lags)


# -- claim: EXPLAIN (ANALYZE, BUFFERS) -----------------------------------------------------------


def explain(query: str, params: dict[str, Any]) -> Plan:
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params)
            (raw,) = cursor.fetchone()
        finally:
            cursor.execute("ROLLBACK")
    return summarize(raw)


def claim_cost(waiting: int, runs: int, batch_size: int) -> None:
    """One claim (and one idle next-claimable query), old SQL and new, same data, same run."""
    ensure_waiting(waiting)
    clear_all_but_waiting()
    use_code("new", both_indexes=True)
    queries = {
        "claim": {"old": OLD_CLAIM, "new": claims.CLAIM},
        "next claimable": {"old": OLD_NEXT_CLAIMABLE, "new": claims.NEXT_CLAIMABLE},
    }
    for what, by_code in queries.items():
        if what == "claim":
            insert_pending(10 * batch_size)  # a small backlog, younger than the waiting rows
        else:
            clear_all_but_waiting()
        results: dict[str, list[Plan]] = {"old": [], "new": []}
        for _ in range(2):  # warm the cache for both
            for code in ("old", "new"):
                explain(by_code[code], claim_params(batch_size))
        for run in range(runs):
            for code in codes_for(True, run):
                results[code].append(explain(by_code[code], claim_params(batch_size)))
        for code, plans in results.items():
            print(
                f"{what:14s} {code}: {spread([p.ms for p in plans], '{:.2f}')} ms; buffers "
                f"{statistics.median(p.buffers for p in plans):,.0f}, rows read "
                f"{statistics.median(p.rows_read for p in plans):,.0f} ({plans[0].scans}); "
                f"batch {batch_size}, {waiting:,} waiting"
            )
        ratio_line(
            f"{what} time",
            {code: [p.ms for p in plans] for code, plans in results.items()},
            higher_is_better=False,
        )
    use_code("new")
    clear_all_but_waiting()


# -- fire-insert ---------------------------------------------------------------------------------

FIRE_INSERT = """
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status, priority)
SELECT g.id, '00000000-0000-0000-0000-000000000000', g.id, 'Schedule', 1, 'bench.tick',
       statement_timestamp(), %s, 'PENDING', 0
FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, 1000) AS n) g
"""


def fire_insert(runs: int) -> None:
    """Milliseconds per 1,000-row outbox insert (as in a fire batch), old index vs new."""
    times: dict[str, list[float]] = {}
    per_run: dict[str, list[float]] = {}
    for run in range(runs):
        for code in codes_for(True, run):
            reset()
            use_code(code)
            these = []
            with connection.cursor() as cursor:
                for _ in range(30):  # 30,000 rows
                    started = time.perf_counter()
                    cursor.execute(FIRE_INSERT, [TOPIC])
                    these.append((time.perf_counter() - started) * 1000)
            times.setdefault(code, []).extend(these)
            per_run.setdefault(code, []).append(statistics.median(these))
    for code, values in times.items():
        quartiles = statistics.quantiles(values, n=4)
        print(
            f"fire-insert {code}: median {statistics.median(values):.2f} ms per 1,000 outbox "
            f"rows (quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}; {len(values)} inserts)"
        )
    ratio_line("fire-insert time (per-run medians)", per_run, higher_is_better=False)
    use_code("new")
    reset()


# -- memory --------------------------------------------------------------------------------------


def memory(messages: int, payload_kib: int, batch_size: int, runs: int, compare: bool) -> None:
    """Peak RSS of a relay process draining ``messages`` events of ``payload_kib`` KiB."""
    reset()
    insert_pending(1, payload_kib)
    size = scalar("SELECT octet_length(payload::text) FROM event_store_t")
    print(f"  payload: {size / 1024:.1f} KiB of JSON text per message")
    idle = relay_process("new", 0, batch_size)[1]
    print(f"  relay process with nothing to deliver: peak RSS {idle:.0f} MB")
    peaks: dict[str, list[float]] = {}
    rates: dict[str, list[float]] = {}
    for run in range(runs):
        for code in codes_for(compare, run):
            use_code(code)
            reset()
            insert_pending(messages, payload_kib)
            delivered, peak, seconds = relay_process(code, messages, batch_size)
            assert delivered == messages, (delivered, messages)
            peaks.setdefault(code, []).append(peak)
            rates.setdefault(code, []).append(messages / seconds)
            print(f"  run {run + 1} {code}: peak RSS {peak:.0f} MB, {messages / seconds:.0f} msg/s")
    for code, values in peaks.items():
        cap = "no byte cap" if code == "old" else "default DSCHED_RELAY_BATCH_BYTES"
        print(
            f"memory {code}: relay peak RSS {spread(values)} MB delivering {messages:,} "
            f"messages of {size / 1024:.0f} KiB, batch {batch_size}, {cap}; "
            f"{spread(rates[code])} msg/s"
        )
    ratio_line("memory", peaks, higher_is_better=False)
    ratio_line("throughput", rates, higher_is_better=True)
    use_code("new")
    reset()


def relay_process(code: str, messages: int, batch_size: int) -> tuple[int, float, float]:
    """Run a relay in a process of its own; return (delivered, peak RSS in MB, seconds)."""
    out = subprocess.run(
        [sys.executable, __file__, "relay-process", code, str(batch_size)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": URL},
    ).stdout.split()
    return int(out[-3]), float(out[-2]), float(out[-1])


def relay_process_main(code: str, batch_size: int) -> None:
    """The child of ``memory``: deliver what is claimable; print delivered, VmHWM (MB) and
    the seconds it took."""
    relay.claim_batch, relay.seconds_until_claimable = (  # type: ignore[assignment]
        OLD_FUNCTIONS if code == "old" else NEW_FUNCTIONS
    )
    registry.register(noop, topic=TOPIC)
    relay_ = Relay(
        instance_id="bench", batch_size=batch_size, transports=Transports(transports_for("", None))
    )
    started = time.perf_counter()
    delivered = relay_.run_until_idle()
    print(delivered, peak_rss_mb(), time.perf_counter() - started)


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    if sys.argv[1:2] == ["relay-process"]:
        relay_process_main(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "what",
        nargs="?",
        choices=["throughput", "latency", "claim", "fire-insert", "memory", "all"],
        default="all",
    )
    parser.add_argument("--messages", type=int)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--waiting", type=int, help="default: 0 (claim: 1,000,000)")
    parser.add_argument("--payload-kib", type=int, default=64)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(f"PostgreSQL {connection.pg_version}; load average {os.getloadavg()[0]:.1f}")
    step: Callable[[], None]
    for what, step in (
        ("throughput", lambda: throughput(
            args.messages or 20_000, args.runs, args.batch_size, args.waiting or 0,
            args.compare)),
        ("latency", lambda: latency(
            args.schedules, args.seconds, args.runs if args.what == "latency" else 1,
            args.waiting or 0, args.compare)),
        ("claim", lambda: claim_cost(
            1_000_000 if args.waiting is None else args.waiting, args.runs, args.batch_size)),
        ("fire-insert", lambda: fire_insert(args.runs)),
        ("memory", lambda: memory(
            args.messages or 3000, args.payload_kib, args.batch_size, args.runs, args.compare)),
    ):  # fmt: skip
        if args.what == what or (args.what == "all" and what in ("throughput", "latency")):
            step()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    reset()


if __name__ == "__main__":
    main()
