"""Benchmark of the outbox relay: delivery throughput and fire-to-delivery latency.

    .venv/bin/python bench/relay_bench.py                       # both, defaults below
    .venv/bin/python bench/relay_bench.py throughput --messages 20000 --runs 5
    .venv/bin/python bench/relay_bench.py latency --schedules 200 --seconds 20

``throughput``: a backlog of pending messages is drained by one relay (the ``Relay`` loop of
``run_relay``, in this process) to the in-process handler transport (a no-op handler) and to
Redis Streams (a redis-server started here on a free port); prints messages per second.

``latency``: a real ``run_scheduler`` process fires schedules every second while one relay
delivers them; prints p50/p99 of ``delivered_ts - event_ts`` (both database times: the fire
statement's time and the time the delivery was recorded, so the figure includes sending and
recording).

Runs against a ``dsched_relay_bench`` database (on the embedded PostgreSQL unless
DATABASE_URL is set). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import ROOT, configure

URL = configure("dsched_relay_bench")

import logging  # noqa: E402

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_dsched.handlers import registry  # noqa: E402
from django_dsched.outbox.relay import Relay  # noqa: E402
from django_dsched.outbox.transports import Transports  # noqa: E402

logging.getLogger("django_dsched").setLevel(logging.WARNING)

TOPIC = "bench"


def sql(query: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def reset() -> None:
    sql("TRUNCATE schedule_t, event_store_t, outbox_message_t, scheduler_lock_t")


def insert_pending(count: int) -> None:
    sql(
        """
        INSERT INTO outbox_message_t (id, host_id, aggregate_id, aggregate_type,
            aggregate_version, event_type, event_ts, payload, metadata, topic, status)
        SELECT g.id, '00000000-0000-0000-0000-000000000000', g.id, 'Schedule', 1, 'bench.tick',
               statement_timestamp() + g.n * interval '1 microsecond',
               jsonb_build_object('specversion', '1.0', 'id', g.id, 'type', 'bench.tick',
                                  'source', '/django-dsched/bench', 'topic', %s,
                                  'time', statement_timestamp(),
                                  'datacontenttype', 'application/json',
                                  'data', jsonb_build_object('n', g.n, 'report', 'monthly')),
               '{}'::jsonb, %s, 'PENDING'
        FROM (SELECT gen_random_uuid() AS id, n FROM generate_series(1, %s) AS n) g
        """,
        [TOPIC, TOPIC, count],
    )
    sql("ANALYZE outbox_message_t")


def noop(event: dict) -> None:
    pass


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="dsched-bench-redis-") as workdir:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


def transports_for(kind: str, redis_url: str | None) -> dict:
    if kind == "redis":
        return {"*": {"BACKEND": "redis", "OPTIONS": {"URL": redis_url, "MAXLEN": 100_000}}}
    return {"*": {"BACKEND": "handlers"}}


def throughput(messages: int, runs: int, batch_size: int) -> None:
    registry.register(noop, topic=TOPIC)
    with redis_server() as redis_url:
        for kind in ("handlers", "redis"):
            rates = []
            for _ in range(runs):
                reset()
                insert_pending(messages)
                relay = Relay(
                    instance_id="bench",
                    batch_size=batch_size,
                    transports=Transports(transports_for(kind, redis_url)),
                )
                started = time.perf_counter()
                delivered = relay.run_until_idle()
                elapsed = time.perf_counter() - started
                assert delivered == messages, (delivered, messages)
                rates.append(messages / elapsed)
            print(
                f"throughput {kind:8s}: median {statistics.median(rates):8.0f} msg/s "
                f"(runs: {', '.join(f'{r:.0f}' for r in rates)}; {messages} messages, "
                f"batch {batch_size})"
            )


def latency(schedules: int, seconds: int) -> None:
    registry.register(noop, topic=TOPIC)
    with redis_server() as redis_url:
        for kind in ("handlers", "redis"):
            reset()
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
            relay = Relay(
                instance_id="bench", transports=Transports(transports_for(kind, redis_url))
            )
            thread = threading.Thread(target=relay.run)
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
                relay.stop()
                thread.join(30)
            lags = sorted(
                row[0] * 1000
                for row in sql(
                    "SELECT extract(epoch FROM delivered_ts - event_ts) FROM outbox_message_t"
                    " WHERE status = 'DELIVERED'"
                )
            )
            pending = sql("SELECT count(*) FROM outbox_message_t WHERE status <> 'DELIVERED'")
            if not lags:
                print(f"latency {kind}: nothing delivered")
                continue
            p50 = lags[len(lags) // 2]
            p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
            print(
                f"latency    {kind:8s}: fire to delivery p50 {p50:6.1f} ms, p99 {p99:6.1f} ms, "
                f"max {lags[-1]:6.1f} ms ({len(lags)} deliveries of {schedules} schedules "
                f"every 1 s for {seconds} s; {pending[0][0]} left undelivered at stop)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["throughput", "latency", "all"], default="all")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if args.what in ("throughput", "all"):
        throughput(args.messages, args.runs, args.batch_size)
    if args.what in ("latency", "all"):
        latency(args.schedules, args.seconds)
    reset()


if __name__ == "__main__":
    main()
