"""One relay against one scheduler, and against a hand-written ceiling, in the same run.

    .venv/bin/python bench/pipeline_bench.py rates --runs 5
    .venv/bin/python bench/pipeline_bench.py e2e --runs 5
    .venv/bin/python bench/pipeline_bench.py e2e --messages 1000000 --runs 3 --kinds redis
    .venv/bin/python bench/pipeline_bench.py lag --seconds 30 --runs 5
    .venv/bin/python bench/pipeline_bench.py claim --waiting 1000000 --runs 11
    DSCHED_BENCH_SERVER=stock .venv/bin/python bench/pipeline_bench.py rates --runs 5

``rates``: each round fires a burst of ``--messages`` (20,000) due schedules with a real
``run_scheduler`` process (nothing delivering), then delivers those messages with one relay
(a process of its own running the ``Relay`` loop until idle, as ``run_relay --once`` does;
a no-op handler, then Redis Streams), then with the ceiling. Each drain starts from the same
messages, set back to pending and vacuumed. Rates are on the database clock, the same way
for all three: the scheduler's fires/s while firing (``fire_bench.py``'s figure: first to
last fire statement, scaled for the first batch), the relay's messages from its first claim
(``picked_ts``) to its last recorded delivery (``delivered_ts``), the ceiling's likewise.

``e2e``: each round fires the burst alone (the firing time), then again with one relay
running beside the scheduler from before the first fire; prints first fire to last delivery
against the firing time alone, handler and Redis. Beside them, the same ratio for the
hand-written ceilings: the fire path's on these tables (``fire_ceiling.py``, batches of
1,000 as the scheduler's) firing the burst alone, then with the relay's ceiling (below, in a
process of its own, looking every 5 ms) delivering beside it; JIT off in both, as in the
product; the relay's ceiling beside the product's scheduler, after the product's relay in
each round (``relay-ceiling``: the fewest statements a relay on these tables makes, against
the firing the product's relay runs beside); and the machine floor (below). ``--kinds``
picks what a round measures besides the firing alone (``redis`` alone: the issue's line, in
a fraction of the time).

``lag``: 1,000 schedules every second for ``--seconds`` while one relay delivers: p50 / p99 of
fire to delivery (``delivered_ts - event_ts``) and of slot to delivery.

``claim``: ``EXPLAIN ANALYZE`` of one claim of a batch with ``--waiting`` messages on a
backoff (and a small claimable backlog), each code's claim, alternating, under the settings
its relay sets for its claim's transaction (``claims.claim_settings()``, where it has it:
JIT off), else the server's.

**The ceiling** is the least a relay can do per message on these tables, written by hand in
psycopg: per batch, one ``UPDATE ... FROM (SELECT ... ORDER BY priority DESC, <ready time>
LIMIT n FOR UPDATE SKIP LOCKED) RETURNING`` of the ids and payloads (the event's, by id), a
no-op call per message, one ``UPDATE`` marking the batch delivered; autocommit, the same
batch size as the relay. It keeps no attempt phases, no byte cap, no fairness, no fence.

``--baseline DIR`` also runs, alternating with this checkout round by round, the relay of
another checkout (e.g. ``git archive <commit> | tar -x -C DIR``), in the same processes'
shape, on the same data: the old code in the same run. The scheduler is always this
checkout's.

The server: the embedded PostgreSQL unless ``DATABASE_URL`` is set; ``DSCHED_BENCH_SERVER=
stock`` starts Debian's PostgreSQL 15 with its defaults (shared_buffers 512MB,
max_connections 200; ``bench/stock_server.py``). The settings are printed first. The relay and
the scheduler run with ``DEBUG`` off. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATABASE = "dsched_pipeline_bench"
TOPIC = "bench"
FIRE_BATCH = 1000  # the fire ceiling's batch: the scheduler's default (DSCHED_BATCH_SIZE)


# -- the relay child (runs with PYTHONPATH at the checkout measured) ------------------------------


def child(mode: str, kind: str, redis_url: str, batch_size: int) -> None:
    """A relay in its own process, on the ``django_dsched`` of ``sys.path[0]`` (``kind``
    ``ceiling``: the relay's ceiling, serving)."""
    os.environ["DEBUG"] = "False"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    sys.path.append(str(ROOT))  # example_project (the checkout measured stays first)
    import django

    django.setup()
    if kind == "ceiling":
        ceiling_serving(batch_size)
        return
    import django_dsched

    checkout = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]).resolve()
    assert Path(django_dsched.__file__).resolve().is_relative_to(checkout), django_dsched.__file__
    import logging

    from django_dsched.handlers import registry
    from django_dsched.outbox.relay import Relay
    from django_dsched.outbox.transports import Transports

    logging.getLogger("django_dsched").setLevel(logging.WARNING)
    registry.register(lambda event: None, topic=TOPIC)
    relay = Relay(
        instance_id=f"bench-{os.getpid()}",
        batch_size=batch_size or None,
        transports=Transports(transports_for(kind, redis_url)),
    )
    if mode == "drain":
        relay.run_until_idle()
        return
    signal.signal(signal.SIGTERM, lambda *_: relay.stop())
    settles = settled_sizes()
    print("ready", flush=True)
    relay.run()
    stats = relay.stats
    print(
        f"    relay: {stats.batches:,} claims, {stats.claimed / max(1, stats.batches):,.0f}"
        f" messages a claim; {len(settles):,} settles,"
        f" {sum(settles) / max(1, len(settles)):,.0f} outcomes a settle",
        file=sys.stderr,
        flush=True,
    )


def settled_sizes() -> list[int]:
    """The number of outcomes of each settle the relay makes from now on (its batches' sizes,
    printed beside a round's figures)."""
    from django_dsched.outbox import relay as relay_module

    sizes: list[int] = []
    record = relay_module.record

    def counted(using: str, cursor: Any, claimer: Any, done: Any, *args: Any, **kw: Any) -> Any:
        sizes.append(len(done))
        return record(using, cursor, claimer, done, *args, **kw)

    relay_module.record = counted  # type: ignore[assignment]
    return sizes


def ceiling_serving(batch: int) -> None:
    """The relay's ceiling (below) delivering what comes, looking again every 5 ms when it
    finds nothing (the fire ceiling sends no NOTIFY), until SIGTERM."""
    import psycopg
    from relay_ceiling import CEILING_CLAIM, CEILING_SETTLE

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SET jit = off")  # as the product's relay
        print("ready", flush=True)
        while not stopping:
            rows = cur.execute(CEILING_CLAIM, [batch]).fetchall()
            if not rows:
                time.sleep(0.005)
                continue
            for _, payload in rows:
                (lambda payload: None)(payload)  # noop(), defined below this child's exit
            cur.execute(CEILING_SETTLE, [[id_ for id_, _ in rows]], binary=True)


def transports_for(kind: str, redis_url: str) -> dict[str, Any]:
    if kind == "redis":
        return {"*": {"BACKEND": "redis", "OPTIONS": {"URL": redis_url, "MAXLEN": 100_000}}}
    return {"*": {"BACKEND": "handlers"}}


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    sys.exit(0)


sys.path.insert(0, str(HERE))
os.environ["DEBUG"] = "False"
import fire_ceiling  # noqa: E402
import history_days  # noqa: E402
import minimal_ceiling  # noqa: E402
from cpu_busy import CORES, Sampler  # noqa: E402
from redis_server import redis_server  # noqa: E402
from setup_django import configure  # noqa: E402

URL = configure(DATABASE)

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from relay_ceiling import CEILING_CLAIM, CEILING_SETTLE  # noqa: E402 (needs Django set up)

from django_dsched.history import event_ids  # noqa: E402
from django_dsched.models import ids  # noqa: E402
from django_dsched.models import outbox as outbox_model  # noqa: E402
from django_dsched.outbox import claims  # noqa: E402


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def server_line() -> str:
    names = (
        "server_version",
        "shared_buffers",
        "max_connections",
        "max_wal_size",
        "checkpoint_timeout",
        "synchronous_commit",
        "work_mem",
    )
    rows = dict(
        sql(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            [list(names)],
        )
    )
    return ", ".join(f"{n} {rows[n]}" for n in names)


def wal() -> tuple[int, int, int]:
    """(WAL bytes, full-page images, checkpoints) the server has written so far."""
    ((written, images, checkpoints),) = sql(
        "SELECT w.wal_bytes, w.wal_fpi, b.checkpoints_timed + b.checkpoints_req"
        " FROM pg_stat_wal w, pg_stat_bgwriter b"
    )
    return int(written), int(images), int(checkpoints)


def wal_since(before: tuple[int, int, int], count: int) -> str:
    written, images, checkpoints = (a - b for a, b in zip(wal(), before, strict=True))
    return (
        f"WAL {written / count:,.0f} B a message, {images / count:.2f} full-page images a "
        f"message, {checkpoints} checkpoints"
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(median(values))} ({', '.join(fmt.format(v) for v in values)})"


# -- data ----------------------------------------------------------------------------------------


def reset() -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


def insert_schedules(count: int, unit: str, every: int, start_sql: str) -> None:
    """``count`` schedules on one grid, with time-ordered ids (as the package makes them)."""
    sql(
        f"""
        INSERT INTO schedule_t (schedule_id, host_id, schedule_name, frequency_unit,
            frequency_time, start_ts, next_run_ts, next_slot_ts, event_topic, event_type,
            event_data)
        SELECT {ids.sql("i - 1")}, '00000000-0000-0000-0000-000000000000',
               'bench-' || i, %s, %s, {start_sql}, {start_sql}, {start_sql},
               %s, 'bench.tick', jsonb_build_object('n', i)
        FROM generate_series(1, %s) AS i
        """,
        [unit, every, TOPIC, count],
    )
    sql("VACUUM ANALYZE schedule_t")


def set_back_to_pending() -> None:
    """Every message pending again, as the fire left it (then vacuumed and analysed)."""
    sql(
        """
        UPDATE outbox_message_t
        SET status = 'PENDING', attempts = 0, claimed_by = '', claimed_until = NULL,
            next_attempt_ts = NULL, delivered_ts = NULL, last_error = '', picked_ts = NULL,
            started_ts = NULL, completed_ts = NULL, failed_ts = NULL
        """
    )
    sql("VACUUM ANALYZE outbox_message_t")
    # Each drain starts after a checkpoint: the first write of every page after one is a full
    # page image in the WAL (the stock server checkpoints every 5 minutes or 1 GB of WAL).
    sql("CHECKPOINT")


NOTHING_DUE = """SELECT NOT EXISTS (SELECT FROM schedule_t
                                  WHERE active AND next_run_ts <= statement_timestamp())"""


def start_scheduler() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), "run_scheduler",
         "--instance-id=bench", "-v", "0"],
        env={**os.environ, "DATABASE_URL": URL, "DEBUG": "False", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    process.wait(60)


def wait_until(query: str, timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not sql(query)[0][0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {query}")
        time.sleep(every)


# Everything fired and nothing pending: two probes of partial indexes (the due index, and the
# pending ids' function of the relay's claim), cheap at any size. A count of the delivered rows
# instead read the whole table every time: at a million, a good part of a core taken from the
# scheduler and the relay it measured (asked every 0.5 s while they ran).
ALL_DELIVERED = NOTHING_DUE + f" AND (SELECT low IS NULL FROM {outbox_model.PENDING_IDS}())"


def wait_delivered(count: int) -> None:
    """Wait until the burst of ``count`` is fired and every message settled; then check that
    all ``count`` were delivered."""
    wait_until(ALL_DELIVERED, max(600, count / 500), every=0.05)
    ((delivered,),) = sql("SELECT count(*) FROM outbox_message_t WHERE status = 'DELIVERED'")
    if delivered != count:
        raise SystemExit(f"expected {count} deliveries, found {delivered}")


def fire_alone(count: int) -> tuple[float, float, str]:
    """Fire ``count`` due schedules with one scheduler; return (fires/s, firing seconds, the
    WAL it wrote: :func:`wal_since`)."""
    reset()
    insert_schedules(count, "HOURS", 1, "now() - interval '30 minutes'")
    before = wal()
    scheduler = start_scheduler()
    try:
        wait_until(NOTHING_DUE, max(600, count / 500), every=0.1)
    finally:
        stop(scheduler)
    return *firing(count), wal_since(before, count)


def firing(count: int) -> tuple[float, float]:
    """(fires/s while firing, firing seconds) from the events' statement times: the span
    from the first fire statement to the last, scaled by batches / (batches - 1) for the
    last batch's own time (as ``fire_bench.py``)."""
    ((span, batches, written),) = sql(
        "SELECT extract(epoch FROM max(event_ts) - min(event_ts)), count(DISTINCT event_ts),"
        " count(*) FROM event_store_t"
    )
    if written != count:
        raise SystemExit(f"expected {count} fires, found {written}")
    seconds = float(span) * batches / (batches - 1) if batches > 1 else float("nan")
    return count / seconds, seconds


def delivery_rate(count: int) -> float:
    """Messages/s from the first claim to the last recorded delivery (database clock)."""
    ((span, delivered),) = sql(
        "SELECT extract(epoch FROM max(delivered_ts) - min(picked_ts)),"
        " count(*) FILTER (WHERE status = 'DELIVERED') FROM outbox_message_t"
    )
    if delivered != count:
        raise SystemExit(f"expected {count} deliveries, found {delivered}")
    return count / float(span)


# -- the relay, in a process of its own ------------------------------------------------------------


def child_command(checkout: Path, mode: str, kind: str, redis_url: str, batch: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "child", mode, kind, redis_url,
            str(batch)]  # fmt: skip


def child_env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": URL, "DEBUG": "False", "PYTHONPATH": str(checkout)}


def relay_drain(checkout: Path, kind: str, redis_url: str, batch: int) -> None:
    subprocess.run(
        child_command(checkout, "drain", kind, redis_url, batch),
        env=child_env(checkout),
        check=True,
    )


@contextmanager
def relay_serving(checkout: Path, kind: str, redis_url: str, batch: int) -> Iterator[None]:
    process = subprocess.Popen(
        child_command(checkout, "serve", kind, redis_url, batch),
        env=child_env(checkout),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("the relay did not start")
        yield
    finally:
        stop(process)


# -- the ceiling -----------------------------------------------------------------------------------


def noop(payload: str) -> None:
    pass


def ceiling(batch: int) -> None:
    with psycopg.connect(URL, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            rows = cur.execute(CEILING_CLAIM, [batch]).fetchall()
            if not rows:
                return
            for _, payload in rows:
                noop(payload)
            cur.execute(CEILING_SETTLE, [[id_ for id_, _ in rows]], binary=True)


# -- redis -----------------------------------------------------------------------------------------


# -- the measurements ------------------------------------------------------------------------------


def codes(baseline: Path | None, run: int) -> list[tuple[str, Path]]:
    """The checkouts measured this round; with a baseline, which goes first alternates."""
    if baseline is None:
        return [("new", ROOT)]
    both = [("old", baseline), ("new", ROOT)]
    return both if run % 2 == 0 else both[::-1]


def rates(count: int, runs: int, batch: int, baseline: Path | None) -> None:
    fire: list[float] = []
    ceil: list[float] = []
    relay: dict[tuple[str, str], list[float]] = {}
    with redis_server() as redis_url:
        for run in range(runs):
            fire_rate, _, _ = fire_alone(count)
            fire.append(fire_rate)
            line = [f"round {run + 1} (load {load()}): fire {fire_rate:,.0f}/s"]
            steps: list[tuple[str, str, Path | None]] = [
                (kind, code, path) for kind in ("handlers", "redis") for code, path in codes(
                    baseline, run)
            ]  # fmt: skip
            steps.append(("ceiling", "", None))
            if run % 2:
                steps.reverse()
            for kind, code, path in steps:
                set_back_to_pending()
                if path is None:
                    ceiling(batch)
                    ceil.append(delivery_rate(count))
                    line.append(f"ceiling {ceil[-1]:,.0f}/s")
                    continue
                relay_drain(path, kind, redis_url, batch)
                relay.setdefault((kind, code), []).append(delivery_rate(count))
                line.append(f"{kind} {code} {relay[kind, code][-1]:,.0f}/s")
            print("  " + "; ".join(line), flush=True)
    print(f"rates: {count:,}-message bursts, medians of {runs} rounds (per round)")
    print(f"  scheduler, fires/s while firing: {spread(fire)}")
    print(f"  ceiling (batch {batch}), msg/s: {spread(ceil)}")
    for (kind, code), values in relay.items():
        to_fire = [v / f for v, f in zip(values, fire, strict=True)]
        to_ceiling = [v / c for v, c in zip(values, ceil, strict=True)]
        print(
            f"  relay {code} {kind}, msg/s: {spread(values)}; / fire rate "
            f"{spread(to_fire, '{:.2f}')}; / ceiling {spread(to_ceiling, '{:.2f}')}"
        )


def span(query: str) -> tuple[float, float]:
    """(start, end) as Unix times, from a query of two timestamptz (the database's clock)."""
    ((start, end),) = sql(query)
    return start.timestamp(), end.timestamp()


def machine_floor(count: int, seconds: float, redis_url: str, batch: int) -> float:
    """The least first fire to last delivery / firing alone this machine allows: the busy CPU
    seconds of the firing alone (its span, every process's) plus those of one relay draining
    the burst alone (this checkout's, no-op handler), over the cores, against the firing
    alone's time. Fired and delivered at once, both need that CPU time within the span."""
    with Sampler() as cpu:
        fire_alone(count)
    fire_cpu = cpu.busy(*span("SELECT min(event_ts), max(event_ts) FROM event_store_t"))
    with Sampler() as cpu:
        relay_drain(ROOT, "handlers", redis_url, batch)
    relay_cpu = cpu.busy(*span("SELECT min(picked_ts), max(delivered_ts) FROM outbox_message_t"))
    return max(seconds, (fire_cpu + relay_cpu) / CORES) / seconds


def ceiling_fire(batch: int) -> None:
    """Fire what is due (waiting for the first due schedule) with the fire path's ceiling on
    these tables (bench/fire_ceiling.py), JIT off as in the scheduler."""
    wait_until("SELECT NOT " + NOTHING_DUE.removeprefix("SELECT "), 60, every=0.001)
    with psycopg.connect(URL, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SET jit = off")
        cur.execute("SET dsched.firing = 'on'")  # the schedules' NOTIFY trigger stays quiet
        minimal_ceiling.drain(conn, cur, fire_ceiling.STATEMENTS, batch, event_ids.event_id)


def ceiling_e2e(count: int, batch: int) -> tuple[float, float]:
    """The hand-written ceiling of ``e2e``: the fire ceiling firing the burst alone, then
    again with the relay's ceiling (a process of its own) delivering beside it; (firing
    alone, first fire to last delivery) in seconds."""
    reset()
    insert_schedules(count, "HOURS", 1, "now() - interval '30 minutes'")
    ceiling_fire(FIRE_BATCH)
    _, seconds = firing(count)
    reset()
    insert_schedules(count, "HOURS", 1, "date_trunc('second', now()) + '3 s'")
    with relay_serving(ROOT, "ceiling", "", batch):
        ceiling_fire(FIRE_BATCH)
        wait_delivered(count)
    ((total,),) = sql(
        "SELECT extract(epoch FROM (SELECT max(delivered_ts) FROM outbox_message_t)"
        " - (SELECT min(event_ts) FROM event_store_t))"
    )
    return seconds, float(total)


E2E_KINDS = ("floor", "ceiling", "handlers", "redis", "relay-ceiling")


def e2e(count: int, runs: int, batch: int, baseline: Path | None, kinds: list[str]) -> None:
    alone: list[float] = []
    floors: list[float] = []
    ratios: dict[tuple[str, str], list[float]] = {}
    with redis_server() as redis_url:
        for run in range(runs):
            _, seconds, written = fire_alone(count)
            alone.append(seconds)
            line = [f"round {run + 1} (load {load()}): firing alone {seconds:.3f} s ({written})"]
            if "floor" in kinds:
                floors.append(machine_floor(count, seconds, redis_url, batch))
                line.append(f"machine floor {floors[-1]:.2f}x")
            if "ceiling" in kinds:
                ceiling_alone, ceiling_total = ceiling_e2e(count, batch)
                ratios.setdefault(("ceiling", ""), []).append(ceiling_total / ceiling_alone)
                line.append(
                    f"ceiling: firing alone {ceiling_alone:.3f} s, first fire to last delivery "
                    f"{ceiling_total:.3f} s ({ceiling_total / ceiling_alone:.2f}x)"
                )
            for kind in [k for k in ("handlers", "redis", "relay-ceiling") if k in kinds]:
                by_hand = kind == "relay-ceiling"
                measured = [("beside the scheduler", ROOT)] if by_hand else codes(baseline, run)
                for code, path in measured:
                    reset()
                    insert_schedules(count, "HOURS", 1, "date_trunc('second', now()) + '3 s'")
                    before = wal()
                    child_kind = "ceiling" if by_hand else kind
                    with relay_serving(path, child_kind, redis_url, batch):
                        scheduler = start_scheduler()
                        try:
                            wait_delivered(count)
                        finally:
                            stop(scheduler)
                    ((total,),) = sql(
                        "SELECT extract(epoch FROM (SELECT max(delivered_ts) FROM "
                        "outbox_message_t) - (SELECT min(event_ts) FROM event_store_t))"
                    )
                    _, fired = firing(count)
                    ratio = float(total) / seconds
                    ratios.setdefault((kind, code), []).append(ratio)
                    line.append(
                        f"{kind} {code}: first fire to last delivery {float(total):.3f} s "
                        f"({ratio:.2f}x; firing {fired:.3f} s; {wal_since(before, count)})"
                    )
            print("  " + "; ".join(line), flush=True)
    print(f"e2e: {count:,}-fire bursts, medians of {runs} rounds (per round)")
    print(f"  firing alone, s: {spread(alone, '{:.3f}')}")
    if floors:
        print(
            f"  machine floor ((CPU of the firing alone + of one relay's drain alone) / {CORES} "
            f"cores / firing alone): {spread(floors, '{:.2f}')}"
        )
    for (kind, code), values in ratios.items():
        name = "ceiling (by hand)" if kind == "ceiling" else f"{kind} {code}"
        print(f"  {name}: first fire to last delivery / firing alone "
              f"{spread(values, '{:.2f}')}")  # fmt: skip


def lag(schedules: int, seconds: int, runs: int, batch: int, baseline: Path | None) -> None:
    results: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    with redis_server() as redis_url:
        for run in range(runs):
            for kind in ("handlers", "redis"):
                for code, path in codes(baseline, run):
                    reset()
                    insert_schedules(schedules, "SECONDS", 1, "date_trunc('second', now()) + '2 s'")
                    with relay_serving(path, kind, redis_url, batch):
                        scheduler = start_scheduler()
                        time.sleep(seconds + 2)
                        stop(scheduler)
                        time.sleep(1)
                    rows = sql(
                        """
                        SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
                                   ORDER BY extract(epoch FROM o.delivered_ts - o.event_ts)),
                               percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
                                   ORDER BY extract(epoch FROM o.delivered_ts - e.scheduled_ts)),
                               percentile_cont(0.99) WITHIN GROUP (
                                   ORDER BY extract(epoch FROM e.event_ts - e.scheduled_ts)),
                               count(*)
                        FROM outbox_message_t o JOIN event_store_t e ON e.id = o.id
                        WHERE o.status = 'DELIVERED'
                        """
                    )
                    fire_to, slot_to, fire_p99, n = rows[0]
                    figures = (*(1000 * v for v in (*fire_to, *slot_to, fire_p99)), n)
                    results.setdefault((kind, code), []).append(figures)
                    print(
                        f"  round {run + 1} {kind} {code} (load {load()}): fire to delivery "
                        f"p50 {figures[0]:.1f} / p99 {figures[1]:.1f} ms; slot to delivery "
                        f"p50 {figures[2]:.1f} / p99 {figures[3]:.1f} ms; fire lag p99 "
                        f"{figures[4]:.1f} ms; {n} deliveries",
                        flush=True,
                    )
    print(f"lag: {schedules} schedules every second for {seconds} s, medians of {runs} rounds")
    for (kind, code), values in results.items():
        cols = list(zip(*values, strict=True))
        print(
            f"  {kind} {code}: fire to delivery p50 {spread(list(cols[0]), '{:.1f}')} ms, "
            f"p99 {spread(list(cols[1]), '{:.1f}')} ms; slot to delivery p99 "
            f"{spread(list(cols[3]), '{:.1f}')} ms; fire lag p99 "
            f"{spread(list(cols[4]), '{:.1f}')} ms"
        )


def claim_cost(waiting: int, runs: int, batch: int, baseline: Path | None) -> None:
    """EXPLAIN ANALYZE of one claim of ``batch`` with ``waiting`` messages on a backoff."""
    reset()
    chunk = 250_000
    for offset in range(0, waiting, chunk):
        sql(
            """
            INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
                aggregate_version, event_type, event_ts, topic, status, attempts, last_error,
                next_attempt_ts)
            SELECT g.id, '00000000-0000-0000-0000-000000000000', g.id, 'Schedule', 1,
                   'bench.tick',
                   statement_timestamp() - interval '1 day' + g.n * interval '1 microsecond',
                   %s, 'PENDING', 3, 'waiting',
                   statement_timestamp() + interval '1 day' + (g.n %% 3600) * interval '1 s'
            FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(%s + 1, %s) AS n) g
            """,
            [TOPIC, offset, min(waiting, offset + chunk)],
        )
    insert_schedules(10 * batch, "HOURS", 1, "now() - interval '30 minutes'")
    scheduler = start_scheduler()  # a claimable backlog, as fires write it
    try:
        wait_until(NOTHING_DUE, 600, every=0.1)
    finally:
        stop(scheduler)
    sql("VACUUM ANALYZE outbox_message_t")
    modules: dict[str, Any] = {"new": claims}
    if baseline is not None:
        spec = importlib.util.spec_from_file_location(
            "baseline_claims", baseline / "django_dsched" / "outbox" / "claims.py"
        )
        assert spec is not None and spec.loader is not None
        modules["old"] = sys.modules["baseline_claims"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules["old"])
    times: dict[str, list[float]] = {code: [] for code in modules}
    for run in range(runs + 2):  # the first two warm the cache
        for code in modules if run % 2 == 0 else reversed(list(modules)):
            module = modules[code]
            args = module.claim_args(module.Claimer("bench", 60.0, 10), batch, 8 << 20, None)
            with connection.cursor() as cursor:
                if hasattr(module, "pending_ids"):  # the claim's range, as the relay reads it
                    args.update(module.pending_ids(cursor) or {})
                cursor.execute("BEGIN")
                # The claim's own settings, as its relay runs it (JIT off, where the code
                # sets that), not this session's.
                settings = module.claim_settings() if hasattr(module, "claim_settings") else {}
                for name, value in settings.items():
                    cursor.execute("SELECT set_config(%s, %s, true)", [name, str(value)])
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + module.CLAIM, args)
                (raw,) = cursor.fetchone()
                cursor.execute("ROLLBACK")
            plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
            if run >= 2:
                times[code].append(plan["Planning Time"] + plan["Execution Time"])
    for code, values in times.items():
        print(
            f"claim {code}: {spread(values, '{:.2f}')} ms (planning + execution), batch "
            f"{batch}, {waiting:,} waiting"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["rates", "e2e", "lag", "claim"])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=claims_default_batch(),
        help="the relays' (this checkout's and a baseline's) and the ceiling's",
    )
    parser.add_argument(
        "--kinds",
        default=",".join(E2E_KINDS),
        help="e2e: what each round measures besides the firing alone, of "
        f"{','.join(E2E_KINDS)} (default: all)",
    )
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=Path, help="another checkout's relay, alternating")
    parser.add_argument(
        "--history-days",
        type=int,
        help="keep exactly this many past days of history (45: the default retention's;"
        " bench/history_days.py); unset: the days as they are",
    )
    args = parser.parse_args()
    if unknown := set(args.kinds.split(",")) - set(E2E_KINDS):
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}")
    call_command("migrate", verbosity=0)
    days = history_days.keep(args.history_days)
    print(f"database: {server_line()}; load {load()}", flush=True)
    print(f"history: {days} outbox partitions", flush=True)
    if args.what == "rates":
        rates(args.messages, args.runs, args.batch_size, args.baseline)
    elif args.what == "e2e":
        e2e(args.messages, args.runs, args.batch_size, args.baseline, args.kinds.split(","))
    elif args.what == "lag":
        lag(args.schedules, args.seconds, args.runs, args.batch_size, args.baseline)
    else:
        claim_cost(args.waiting, args.runs, args.batch_size, args.baseline)
    print(f"load at the end {load()}")


def claims_default_batch() -> int:
    from django_dsched.conf import app_settings

    return int(app_settings.RELAY_BATCH_SIZE)


if __name__ == "__main__":
    main()
