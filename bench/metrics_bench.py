"""What metrics cost one fire batch: the fire path with metrics on and off, interleaved.

    .venv/bin/python bench/metrics_bench.py --pairs 60 --batch 1000

Claims and fires the same ``--batch`` due schedules over and over in one process (each
batch rolled back), alternating metrics off and on, so drift in a shared machine's load
hits both alike (which one goes first alternates too). "On" is
``fire_batch(..., BatchOptions(metrics=True))`` (the per-topic counts in the write) plus
``SchedulerMetrics.batch`` (the lag histogram and counters); "off" is the plain batch.
Prints the medians, the median of the per-pair ratios, and the Python-side cost of
feeding the series alone. Asserts nothing. (fire_bench.py --metrics measures the same
end to end, with a real ``run_scheduler``.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from setup_django import configure

configure("dsched_bench")

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

LEASE = """
INSERT INTO scheduler_lock_t (lock_id, instance_id, epoch, last_heartbeat, holder_pid)
VALUES (1, 'bench', 1, clock_timestamp(), 0)
ON CONFLICT (lock_id) DO UPDATE
SET instance_id = 'bench', epoch = 1, last_heartbeat = clock_timestamp()
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--batch", type=int, default=1000)
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    import fire_bench

    from django_dsched.firing.batch import BatchOptions, fire_batch
    from django_dsched.firing.fence import Fence
    from django_dsched.metrics.scheduler import scheduler_metrics

    fire_bench.reset()
    fire_bench.insert_schedules(options.batch, "HOURS", 1, "now() - interval '30 minutes'")
    metrics = scheduler_metrics()
    fence = Fence(1, "bench", 1, 30.0)

    def one(on: bool) -> tuple[float, float]:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(LEASE)
            started = time.perf_counter()
            result = fire_batch(cursor, fence, options.batch, BatchOptions(metrics=on))
            fired = time.perf_counter()
            if on:
                metrics.batch(result, fired - started)
            done = time.perf_counter()
            assert result.fired == options.batch, result
            transaction.set_rollback(True)
        return done - started, done - fired

    one(False), one(True)  # warm up
    off, on, ratios, feed = [], [], [], []
    for pair in range(options.pairs):
        # Which goes first alternates: the second of a pair finds the first's dead rows.
        if pair % 2:
            measured, fed = one(True)
            plain, _ = one(False)
        else:
            plain, _ = one(False)
            measured, fed = one(True)
        off.append(plain)
        on.append(measured)
        ratios.append(measured / plain)
        feed.append(fed)
    off_ms, on_ms = statistics.median(off) * 1000, statistics.median(on) * 1000
    print(
        f"metrics: {options.pairs} interleaved pairs of a {options.batch}-schedule batch: "
        f"off median {off_ms:.1f} ms, on median {on_ms:.1f} ms, on/off {on_ms / off_ms:.3f} "
        f"(median of per-pair ratios {statistics.median(ratios):.3f}); feeding the series "
        f"{statistics.median(feed) * 1000:.2f} ms per batch"
    )
    fire_bench.reset()


if __name__ == "__main__":
    main()
