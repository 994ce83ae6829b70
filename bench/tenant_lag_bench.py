"""A slow tenant and a fast one through one relay: does B's delivery wait on A's?

    .venv/bin/python bench/tenant_lag_bench.py --runs 5
    DSCHED_BENCH_SERVER=stock .venv/bin/python bench/tenant_lag_bench.py --runs 5
    .venv/bin/python bench/tenant_lag_bench.py --seconds 15 --runs 1   # a smoke run
    .venv/bin/python bench/tenant_lag_bench.py --b-handler              # B: an in-process handler
    DSCHED_BENCH_SERVER=stock .venv/bin/python bench/tenant_lag_bench.py --runs 3 --jit off

The figure of issue 40: "Tenant A's destination answering in 8 s, tenant B's in 1 ms, one
relay: B's delivery lag p99 <= 1 s, and none of B's messages waits on A's." (Reported before
concurrent sends: in 40 s, B got 5 of 195 messages delivered.)

A local endpoint (``bench/http_server.py``: asyncio, keep-alive, a process of its own) answers
``/a`` after ``--a-latency`` (8 s) and ``/b`` after ``--b-latency`` (1 ms). Tenant A (a host
id of its own) has a webhook route to ``/a`` and tenant B one to ``/b``, each in its host's
table (``DSCHED_TRANSPORTS_BY_HOST``), so both go through the same transport (``--b-handler``:
B's route is an in-process no-op handler instead). One relay (``Relay(...).run()`` in a thread
of this process) runs with the settings a user gets: the default ``DSCHED_RELAY_CONCURRENCY``,
``DSCHED_RELAY_HOST_CONCURRENCY``, route ``CONCURRENCY`` and webhook ``TIMEOUT`` (printed).

Each run has two phases of ``--seconds`` each, in which a writer thread (its own connection)
inserts messages as a fire writes them (the event, and its outbox row with the tenant's host
id; then a NOTIFY, as the fire statement does):

1. *B alone*: B's messages at ``--b-rate`` a second, no A traffic: the ceiling, what one relay
   gives B when nothing else is sent (B's endpoint latency plus one relay round);
2. *A and B*: A's at ``--a-rate`` and B's at ``--b-rate``.

Then the writer stops, the bench waits for B's messages to be delivered, and the relay stops
(it gives A's queued messages back). Per run it prints B's lag in phase 2 (``delivered_ts``
minus ``event_ts``, both database times: from the moment the message was written and
claimable to the moment its outcome was recorded; p50, p99, max, count), B's delivered within
the phase against written, B-alone's lag and the ratio of the two p99s, A's lag and its
delivered against written (A cannot keep up: ``CONCURRENCY`` in flight / 8 s is below its
rate, by design its backlog is its own), how many of B's messages waited at least A's
latency (none should: a B message waiting on an A send would wait that long), what the relay
gave back or deferred, and the load average. Medians over ``--runs``, and a ``RESULT {json}``
line per run. Each claim of the relay is timed (its median and longest are printed), and the
server's ``jit`` with them: ``--jit off`` turns it off for the bench's database (every session
of the relay) for the runs, to compare (a claim compiled by JIT took 1.6 s: bench/NOTES.md).

Runs against a ``dsched_tenant_lag_bench`` database (``$BENCH_DATABASE`` if set), on the
embedded PostgreSQL unless DATABASE_URL is set, or on a stock PostgreSQL 15 with
``DSCHED_BENCH_SERVER=stock`` (``bench/stock_server.py``). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"  # no query log growing with the run

from http_server import start
from setup_django import configure

configure(os.environ.get("BENCH_DATABASE", "dsched_tenant_lag_bench"))

import logging  # noqa: E402

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import override_settings  # noqa: E402

from django_dsched.conf import app_settings  # noqa: E402
from django_dsched.handlers import registry  # noqa: E402
from django_dsched.outbox.relay import Relay  # noqa: E402
from django_dsched.outbox.transports.webhook import WebhookTransport  # noqa: E402

logging.getLogger("django_dsched").setLevel(logging.WARNING)

TENANT_A = "00000000-0000-0000-0000-00000000000a"
TENANT_B = "00000000-0000-0000-0000-00000000000b"

# One event and its message as a fire writes them: the payload once, in the event.
INSERT = """
WITH events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
        event_type, event_ts, payload, metadata)
    SELECT g.id, %(host)s::uuid, g.id, 'Schedule', 1, %(topic)s || '.tick',
           statement_timestamp(), jsonb_build_object('report', 'monthly'),
           jsonb_build_object('topic', %(topic)s)
    FROM (SELECT gen_random_uuid() AS id) g
    RETURNING id, host_id, aggregate_id, event_type, event_ts
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status)
SELECT id, host_id, aggregate_id, 'Schedule', 1, event_type, event_ts, %(topic)s, 'PENDING'
FROM events
"""


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def now() -> datetime:
    ((at,),) = sql("SELECT statement_timestamp()")
    return at  # type: ignore[no-any-return]


def write(rates: dict[str, float], seconds: float) -> tuple[datetime, datetime]:
    """Write each topic's messages at its rate for ``seconds`` (on this thread's connection);
    the database times of the first and the last."""
    hosts = {"a": TENANT_A, "b": TENANT_B}
    started = time.monotonic()
    due = {topic: started for topic in rates}
    first = now()
    while True:
        topic = min(due, key=due.__getitem__)
        at = due[topic]
        if at - started >= seconds:
            break
        time.sleep(max(0.0, at - time.monotonic()))
        sql(INSERT, {"host": hosts[topic], "topic": topic})
        sql("SELECT pg_notify('dsched_outbox', '')")  # as the fire statement does
        due[topic] = at + 1.0 / rates[topic]
    return first, now()


def lags(topic: str, since: datetime, until: datetime) -> list[float]:
    """Delivery lags (ms) of the topic's delivered messages written in [since, until]."""
    rows = sql(
        "SELECT extract(epoch FROM delivered_ts - event_ts) * 1000 FROM outbox_message_t"
        " WHERE topic = %s AND event_ts BETWEEN %s AND %s AND delivered_ts IS NOT NULL",
        [topic, since, until],
    )
    return sorted(float(row[0]) for row in rows)


def counts(topic: str, since: datetime, until: datetime, by: datetime) -> tuple[int, int]:
    """The topic's messages written in [since, until]: how many, and how many delivered by
    ``by``."""
    ((written, delivered),) = sql(
        "SELECT count(*), count(*) FILTER (WHERE delivered_ts <= %s) FROM outbox_message_t"
        " WHERE topic = %s AND event_ts BETWEEN %s AND %s",
        [by, topic, since, until],
    )
    return int(written), int(delivered)


def summary(values: list[float]) -> dict[str, float]:
    nan = float("nan")
    return {
        "p50": statistics.median(values) if values else nan,
        "p99": values[min(len(values) - 1, int(0.99 * len(values)))] if values else nan,
        "max": values[-1] if values else nan,
        "count": float(len(values)),
    }


def named(prefix: str, lag: dict[str, float], count: str) -> dict[str, float]:
    """A summary's figures under the names of the result (``count`` for the count)."""
    return {f"{prefix}_{k}_ms" if k != "count" else count: v for k, v in lag.items()}


def wait_delivered(topic: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sql(
        "SELECT 1 FROM outbox_message_t WHERE topic = %s AND status <> 'DELIVERED' LIMIT 1",
        [topic],
    ):
        if time.monotonic() > deadline:
            print(f"  (B's messages not all delivered after {timeout:.0f} s)", flush=True)
            return
        time.sleep(0.1)


def watch(relay: Relay, stop: threading.Event, seen: dict[str, int]) -> None:
    """Sample the relay's lanes (for the report: how much of A it held, B's queue)."""
    while not stop.wait(0.2):
        for lane in list(relay.dispatch.lanes.values()):
            name = "a" if lane.host and lane.host.endswith("a") else "b"
            seen[f"{name}_queued_max"] = max(seen.get(f"{name}_queued_max", 0), len(lane.queue))
            seen[f"{name}_sending_max"] = max(seen.get(f"{name}_sending_max", 0), lane.sending)
            if lane.breaker.opened or lane.breaker.stuck:
                seen[f"{name}_circuit_opened"] = 1
        seen["held_max"] = max(seen.get("held_max", 0), len(relay.dispatch.held))


def timed_claims(relay: Relay) -> list[float]:
    """Time each of the relay's claims (ms), on whichever thread it runs."""
    took: list[float] = []
    claim = relay._claim

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return claim(*args, **kwargs)
        finally:
            took.append((time.perf_counter() - started) * 1000)

    relay._claim = timed  # type: ignore[method-assign]
    return took


def one_run(options: argparse.Namespace) -> dict[str, float]:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, relay_circuit_t")
    relay = Relay(instance_id="bench")
    claim_ms = timed_claims(relay)
    relay_thread = threading.Thread(target=relay.run, name="relay")
    stop_watch = threading.Event()
    seen: dict[str, int] = {}
    watcher = threading.Thread(target=watch, args=(relay, stop_watch, seen))
    relay_thread.start()
    watcher.start()
    try:
        alone = write({"b": options.b_rate}, options.seconds)
        wait_delivered("b", 60)
        both = write({"a": options.a_rate, "b": options.b_rate}, options.seconds)
        wait_delivered("b", 120)
    finally:
        stop_watch.set()
        relay.stop()
        relay_thread.join(120)
        watcher.join()
    b_alone = summary(lags("b", *alone))
    b = summary(lags("b", *both))
    a = summary(lags("a", *both))
    b_written, b_in_window = counts("b", *both, by=both[1])
    a_written, a_delivered = counts("a", *both, by=now())
    ((b_waited,),) = sql(
        "SELECT count(*) FROM outbox_message_t WHERE topic = 'b' AND event_ts BETWEEN %s AND %s"
        " AND coalesce(delivered_ts, clock_timestamp()) - event_ts"
        " >= make_interval(secs => %s)",
        [*both, options.a_latency],
    )
    result = {
        **named("b", b, "b_delivered"),
        "b_written": float(b_written),
        "b_in_window": float(b_in_window),
        **named("b_alone", b_alone, "b_alone_delivered"),
        "b_p99_over_alone": b["p99"] / b_alone["p99"] if b_alone["p99"] else float("nan"),
        "b_waited_a_latency": float(b_waited),
        **named("a", a, "a_delivered_in_run"),
        "a_written": float(a_written),
        "a_delivered": float(a_delivered),
        "released": float(relay.stats.released),
        "deferred": float(relay.stats.deferred),
        "claims": float(len(claim_ms)),
        "claim_p50_ms": statistics.median(claim_ms) if claim_ms else float("nan"),
        "claim_max_ms": max(claim_ms, default=float("nan")),
        **{k: float(v) for k, v in sorted(seen.items())},
        "load": os.getloadavg()[0],
    }
    return result


def show(run: int, r: dict[str, float], a_latency: float) -> None:
    print(
        f"  run {run}: B lag p50 {r['b_p50_ms']:.0f} ms, p99 {r['b_p99_ms']:.0f} ms, max "
        f"{r['b_max_ms']:.0f} ms ({r['b_delivered']:.0f} delivered; "
        f"{r['b_in_window']:.0f} of {r['b_written']:.0f} within the phase); "
        f"B alone p99 {r['b_alone_p99_ms']:.0f} ms (p50 {r['b_alone_p50_ms']:.0f}, max "
        f"{r['b_alone_max_ms']:.0f}): ratio {r['b_p99_over_alone']:.2f}; "
        f"B's waiting >= A's {a_latency:g} s: {r['b_waited_a_latency']:.0f}\n"
        f"         A lag p50 {r['a_p50_ms'] / 1000:.1f} s, p99 {r['a_p99_ms'] / 1000:.1f} s, "
        f"max {r['a_max_ms'] / 1000:.1f} s ({r['a_delivered']:.0f} of {r['a_written']:.0f} "
        f"delivered); relay: {r['claims']:.0f} claims (p50 {r['claim_p50_ms']:.0f} ms, max "
        f"{r['claim_max_ms']:.0f} ms), {r['released']:.0f} given back, "
        f"{r['deferred']:.0f} deferred, A queued <= {r.get('a_queued_max', 0):.0f}, "
        f"held <= {r.get('held_max', 0):.0f}, A's circuit opened: "
        f"{bool(r.get('a_circuit_opened'))}; load {r['load']:.1f}",
        flush=True,
    )


def routes(options: argparse.Namespace, url: str) -> dict[str, Any]:
    b_route: dict[str, Any] = (
        {"BACKEND": "handlers"}
        if options.b_handler
        else {"BACKEND": "webhook", "OPTIONS": {"URL": f"{url}/b"}}
    )
    return {
        TENANT_A: {"a": {"BACKEND": "webhook", "OPTIONS": {"URL": f"{url}/a"}}},
        TENANT_B: {"b": b_route},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=40.0, help="each phase's")
    parser.add_argument("--a-rate", type=float, default=2.0, help="A's messages a second")
    parser.add_argument("--b-rate", type=float, default=20.0, help="B's messages a second")
    parser.add_argument("--a-latency", type=float, default=8.0, help="A's endpoint, seconds")
    parser.add_argument("--b-latency", type=float, default=0.001, help="B's endpoint, seconds")
    parser.add_argument("--b-handler", action="store_true", help="B: an in-process handler")
    parser.add_argument(
        "--jit",
        choices=["server", "off"],
        default="server",
        help="server: PostgreSQL's setting (on by default); off: ALTER DATABASE ... SET jit = "
        "off for the runs (every session of the relay), reset after",
    )
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    name = connection.settings_dict["NAME"]
    sql(f'ALTER DATABASE "{name}" RESET jit')
    connection.close()  # a session with the server's settings
    ((jit, jit_cost, jit_available),) = sql(
        "SELECT current_setting('jit'), current_setting('jit_above_cost'), pg_jit_available()"
    )
    if options.jit == "off":
        sql(f'ALTER DATABASE "{name}" SET jit = off')
        connection.close()
        jit = f"{jit}, set off for the bench's database"
    registry.register(lambda event: None, topic="b", hosts=[TENANT_B])
    server = start({"/a": options.a_latency, "/b": options.b_latency})
    print(
        f"PostgreSQL {connection.pg_version} ({connection.settings_dict['NAME']}); "  # type: ignore[attr-defined]
        f"A {options.a_rate:g}/s to {options.a_latency:g} s, B {options.b_rate:g}/s to "
        f"{'a handler' if options.b_handler else f'{options.b_latency * 1000:g} ms'}, "
        f"phases of {options.seconds:g} s\n"
        f"defaults: RELAY_CONCURRENCY {app_settings.RELAY_CONCURRENCY}, "
        f"RELAY_HOST_CONCURRENCY {app_settings.RELAY_HOST_CONCURRENCY}, webhook CONCURRENCY "
        f"{WebhookTransport.concurrency}, TIMEOUT 10 s, RELAY_BATCH_SIZE "
        f"{app_settings.RELAY_BATCH_SIZE}, RELAY_POLL_INTERVAL {app_settings.RELAY_POLL_INTERVAL} "
        f"s, RELAY_CIRCUIT_FAILURES {app_settings.RELAY_CIRCUIT_FAILURES}; jit {jit} (above cost "
        f"{jit_cost}, available: {jit_available}); "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = []
    try:
        with override_settings(
            DSCHED_TRANSPORTS_BY_HOST=routes(options, server.url),
            DSCHED_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"],
            DSCHED_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"],
        ):
            for run in range(options.runs):
                result = one_run(options)
                results.append(result)
                show(run + 1, result, options.a_latency)
                print("RESULT " + json.dumps({"run": run + 1, **result}), flush=True)
    finally:
        requests = dict(server.counts)
        server.stop()
        sql(f'ALTER DATABASE "{name}" RESET jit')
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(
        f"median of {len(results)}: B lag p99 {median['b_p99_ms']:.0f} ms (max "
        f"{median['b_max_ms']:.0f} ms; the figure: <= 1,000 ms); B alone p99 "
        f"{median['b_alone_p99_ms']:.0f} ms, ratio {median['b_p99_over_alone']:.2f}; B's "
        f"waiting >= A's latency {median['b_waited_a_latency']:.0f}; A lag p50 "
        f"{median['a_p50_ms'] / 1000:.1f} s; the endpoint answered {requests}; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("RESULT " + json.dumps({"median": median, "runs": len(results)}))


if __name__ == "__main__":
    main()
