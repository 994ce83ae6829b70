"""One relay, one webhook endpoint answering in 50 ms: how many messages a second it delivers,
beside the ceiling its limits allow (sends in flight / latency).

    .venv/bin/python bench/webhook_bench.py --messages 20000 --in-flight 64 --runs 3
    .venv/bin/python bench/webhook_bench.py --messages 2000 --runs 1   # a smoke run

A local endpoint (``bench/http_server.py``: asyncio, keep-alive, a process of its own)
answers every POST after ``--latency`` seconds. ``--messages`` pending messages of one tenant,
written as a fire writes them, are then delivered by one relay (the ``run_relay`` loop in this
process, ``Relay.run_until_idle``) to a webhook route with ``CONCURRENCY`` = ``--in-flight``
(and the relay's and the host's limits as large). Per run it prints the rate (messages over
the time from the relay's start to its last outcome recorded), the ceiling
(``in-flight / latency``) and their ratio, and the endpoint's count; medians over the runs.
The goal: at least 1,000 a second at 50 ms with 64 in flight (ceiling 1,280).

Runs against a ``dsched_webhook_bench`` database (``$BENCH_DATABASE`` if set), on the embedded
PostgreSQL unless DATABASE_URL is set. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["DEBUG"] = "False"  # no query log growing with the run

from http_server import start
from setup_django import configure

configure(os.environ.get("BENCH_DATABASE", "dsched_webhook_bench"))

import logging  # noqa: E402

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import override_settings  # noqa: E402

from django_dsched.outbox.relay import Relay  # noqa: E402

logging.getLogger("django_dsched").setLevel(logging.WARNING)

TENANT = "00000000-0000-0000-0000-00000000000a"

# Events and their messages as a fire writes them: the payload once, in the event.
INSERT = """
WITH events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
        event_type, event_ts, payload, metadata)
    SELECT g.id, %(host)s::uuid, g.id, 'Schedule', 1, 'hook.tick',
           statement_timestamp() + g.n * interval '1 microsecond',
           jsonb_build_object('n', g.n, 'report', 'monthly'),
           jsonb_build_object('topic', 'hook')
    FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, %(count)s) AS n) g
    RETURNING id, host_id, aggregate_id, event_type, event_ts
)
INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
    event_type, event_ts, topic, status)
SELECT id, host_id, aggregate_id, 'Schedule', 1, event_type, event_ts, 'hook', 'PENDING'
FROM events
"""


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(url: str, options: argparse.Namespace) -> dict[str, float]:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, relay_circuit_t")
    sql(INSERT, {"host": TENANT, "count": options.messages})
    sql("VACUUM ANALYZE outbox_message_t")
    in_flight = options.in_flight
    route = {
        "BACKEND": "webhook",
        "HOSTS": "*",
        "CONCURRENCY": in_flight,
        "OPTIONS": {"URL": f"{url}/hook", "TIMEOUT": 10},
    }
    with override_settings(
        DSCHED_TRANSPORTS={"*": route},
        DSCHED_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"],
        DSCHED_WEBHOOK_ALLOWED_NETWORKS=["127.0.0.0/8"],
        DSCHED_RELAY_CONCURRENCY=in_flight,
        DSCHED_RELAY_HOST_CONCURRENCY=in_flight,
    ):
        relay = Relay(instance_id="bench", batch_size=options.batch_size)
        started, cpu = time.monotonic(), cpu_seconds()
        delivered = relay.run_until_idle()
        seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
    connection.close()  # run_until_idle closed the relay's session: a fresh one
    ((pending,),) = sql("SELECT count(*) FROM outbox_message_t WHERE status <> 'DELIVERED'")
    ceiling = in_flight / options.latency
    rate = delivered / seconds
    return {
        "rate": rate,
        "ceiling": ceiling,
        "ratio": rate / ceiling,
        "seconds": seconds,
        "not_delivered": float(pending),
        "cpu_per_1k": 1000 * cpu / max(1, delivered),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="the endpoint's, seconds")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    server = start({"": options.latency})
    print(
        f"{options.messages:,} messages, {options.in_flight} in flight, endpoint "
        f"{options.latency * 1000:g} ms; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = []
    try:
        for run in range(options.runs):
            result = one_run(server.url, options)
            results.append(result)
            print(
                f"  run {run + 1}: {result['rate']:,.0f} messages/s, ceiling "
                f"{result['ceiling']:,.0f}/s ({result['ratio']:.2f} of it), "
                f"{result['seconds']:.1f} s, {result['not_delivered']:.0f} not delivered, "
                f"relay CPU {result['cpu_per_1k']:.2f} s per 1,000; "
                f"load {result['load']:.1f}",
                flush=True,
            )
    finally:
        requests = dict(server.counts)
        server.stop()
    rate = statistics.median(r["rate"] for r in results)
    ceiling = results[0]["ceiling"]
    print(
        f"median {rate:,.0f} messages/s; ceiling {ceiling:,.0f}/s "
        f"({options.in_flight} in flight / {options.latency * 1000:g} ms): "
        f"{rate / ceiling:.2f} of it; the endpoint answered {sum(requests.values()):,}"
    )


if __name__ == "__main__":
    main()
