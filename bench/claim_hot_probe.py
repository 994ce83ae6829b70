"""Would a claim that stays HOT make the relay's database work cheaper? A probe, not a feature.

    DSCHED_BENCH_SERVER=stock .venv/bin/python bench/claim_hot_probe.py --runs 3

The relay's claim updates ``claimed_until``, which is in the key of both ready indexes
(``GREATEST(event_ts, next_attempt_ts, claimed_until)``), so no claim is a HOT update: every
claim writes a new entry in each of the five indexes a pending message is in. This probe
measures, on the same server and data, the relay's claim and settle statements as built, and
a variant made by hand for the probe only:

- both ready indexes keyed on ``GREATEST(event_ts, next_attempt_ts)`` (no claim in the key);
- every scan of pending rows in the claim adding ``claimed_until IS NULL OR claimed_until <=
  statement_timestamp()`` (it reads past the rows claimed and not settled);
- the outbox partitions at ``--fillfactor`` (45 by default: room on each page for a second
  version of every row, so the claim's new version stays on the page).

Each round fires ``--messages`` due schedules with ``run_scheduler`` (so the messages are laid
out as fires write them), then claims them in batches of 1,000 and settles each batch two
claims later (two batches held, as a relay with claims in flight holds them), until none is
left. Rounds alternate which variant goes first. Prints, per variant, the medians of the
claim's and the settle's time a message (wall clock of the statements), the WAL a message
(``pg_stat_wal``) and the share of the outbox's updates that were HOT. The indexes and the
fillfactor are put back after each variant.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
_argv, sys.argv = sys.argv, sys.argv[:1]  # pipeline_bench reads no arguments at import
import pipeline_bench as pb  # noqa: E402

sys.argv = _argv

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from django_dsched.outbox import claims, settling  # noqa: E402
from django_dsched.outbox.messages import Claimer, DeliveryOutcome, Message  # noqa: E402

BATCH = 1000
HELD = 2  # batches claimed and not yet settled when the next claim runs
READY = claims.AVAILABLE_TS
READY_WITHOUT_CLAIM = "GREATEST(o.event_ts, o.next_attempt_ts)"
UNCLAIMED = "(o.claimed_until IS NULL OR o.claimed_until <= statement_timestamp())"
INDEXES = ("dsched_outbox_ready_idx", "dsched_outbox_host_ready_idx")
HOT_INDEXES = (
    "CREATE INDEX dsched_outbox_ready_idx ON outbox_message_t"
    " (priority DESC, GREATEST(event_ts, next_attempt_ts)) WHERE status = 'PENDING'",
    "CREATE INDEX dsched_outbox_host_ready_idx ON outbox_message_t"
    " (priority DESC, host_id, GREATEST(event_ts, next_attempt_ts)) WHERE status = 'PENDING'",
)
BUILT = dict(claims.CLAIMS)


def hot_claim(statement: str) -> str:
    """The claim with the claim's expiry out of the ready time, and every scan of pending rows
    passing over unexpired claims."""
    return statement.replace(READY, READY_WITHOUT_CLAIM).replace(
        "o.status = %(pending)s AND", f"o.status = %(pending)s AND {UNCLAIMED} AND"
    )


def partitions() -> list[str]:
    return [
        name
        for (name,) in pb.sql(
            "SELECT inhrelid::regclass::text FROM pg_inherits"
            " WHERE inhparent = 'outbox_message_t'::regclass"
        )
    ]


def index_definitions() -> list[str]:
    """The ready indexes as built, to create again on the partitioned table (``pg_get_indexdef``
    of a partitioned index says ``ON ONLY``, which would not build the partitions' indexes)."""
    rows = pb.sql(
        "SELECT pg_get_indexdef(c.oid) FROM pg_class c WHERE c.relname = ANY(%s)", [list(INDEXES)]
    )
    return [definition.replace(" ON ONLY ", " ON ") for (definition,) in rows]


def swap(definitions: tuple[str, ...] | list[str], fillfactor: int | None) -> None:
    """Both ready indexes made again from ``definitions``, and the partitions' fillfactor set
    (None: reset), in one transaction: never a moment without them."""
    with transaction.atomic():
        for name in INDEXES:
            pb.sql(f"DROP INDEX {name}")
        for definition in definitions:
            pb.sql(definition)
        for partition in partitions():
            if fillfactor is None:
                pb.sql(f"ALTER TABLE {partition} RESET (fillfactor)")
            else:
                pb.sql(f"ALTER TABLE {partition} SET (fillfactor = {fillfactor})")


def fire(count: int) -> None:
    pb.reset()
    pb.insert_schedules(count, "HOURS", 1, "now() - interval '30 minutes'")
    scheduler = pb.start_scheduler()
    try:
        pb.wait_until(pb.NOTHING_DUE, 900, every=0.1)
    finally:
        pb.stop(scheduler)
    pb.sql("VACUUM ANALYZE outbox_message_t")


def updates() -> tuple[int, int]:
    ((all_, hot),) = pb.sql(
        "SELECT sum(n_tup_upd), sum(n_tup_hot_upd) FROM pg_stat_user_tables"
        " WHERE relname LIKE 'outbox_message_t_%%'"
    )
    return int(all_ or 0), int(hot or 0)


def drain() -> tuple[int, float, float]:
    """Claim everything in batches, settling each ``HELD`` claims later: (messages, seconds
    in claims, seconds in settles)."""
    claimer = Claimer("probe", 60.0, 10)
    held: list[list[Message]] = []
    claiming = settling_s = 0.0
    count = 0
    with connection.cursor() as cursor:
        while True:
            began = time.perf_counter()
            batch = claims.claim_batch(cursor, claimer, BATCH, 8 << 20).live
            claiming += time.perf_counter() - began
            if batch:
                held.append(batch)
                count += len(batch)
            while len(held) > (HELD if batch else 0):
                began = time.perf_counter()
                settling.settle(cursor, claimer, [DeliveryOutcome(m) for m in held.pop(0)])
                settling_s += time.perf_counter() - began
            if not batch:
                return count, claiming, settling_s


def measure(
    variant: str, count: int, fillfactor: int, built: list[str]
) -> tuple[float, float, float, float]:
    hot = variant == "hot"
    try:
        if hot:
            swap(HOT_INDEXES, fillfactor)
        fire(count)
        claims.CLAIMS.update(
            {key: hot_claim(statement) if hot else statement for key, statement in BUILT.items()}
        )
        before, wal_before = updates(), pb.wal()[0]
        drained, claiming, settling_s = drain()
        assert drained == count, (drained, count)
        pb.sql("SELECT pg_stat_force_next_flush()")  # this session's counts, and the others'
        time.sleep(1)
        after, wal_after = updates(), pb.wal()[0]
    finally:
        claims.CLAIMS.update(BUILT)
        if hot:
            swap(built, None)
    made, made_hot = after[0] - before[0], after[1] - before[1]
    return (
        claiming / count * 1e6,
        settling_s / count * 1e6,
        (wal_after - wal_before) / count,
        made_hot / max(1, made),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fillfactor", type=int, default=45)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    built = index_definitions()
    if len(built) != len(INDEXES) or not all("claimed_until" in d for d in built):
        raise SystemExit(f"the ready indexes are not as migrations make them: {built}")
    print(f"database: {pb.server_line()}; load {pb.load()}", flush=True)
    results: dict[str, list[tuple[float, float, float, float]]] = {"built": [], "hot": []}
    for run in range(args.runs):
        order = ["built", "hot"] if run % 2 == 0 else ["hot", "built"]
        for variant in order:
            figures = measure(variant, args.messages, args.fillfactor, built)
            results[variant].append(figures)
            print(
                f"  round {run + 1} {variant}: claim {figures[0]:.1f} us, settle "
                f"{figures[1]:.1f} us a message; WAL {figures[2]:,.0f} B a message; "
                f"{figures[3]:.0%} of updates HOT (load {pb.load()})",
                flush=True,
            )
    print(f"{args.messages:,} messages, batches of {BATCH}, {HELD} held, medians of {args.runs}:")
    for variant, rows in results.items():
        columns = zip(*rows, strict=True)
        claim_us, settle_us, wal_b, hot_share = (median(column) for column in columns)
        print(
            f"  {variant}: claim {claim_us:.1f} us + settle {settle_us:.1f} us a message; "
            f"WAL {wal_b:,.0f} B a message; {hot_share:.0%} of updates HOT"
        )


if __name__ == "__main__":
    main()
