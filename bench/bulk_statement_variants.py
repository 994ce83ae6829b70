"""What ``bulk_create``'s statement spends its time on: the exact statement against variants.

    .venv/bin/python bench/bulk_statement_variants.py --rounds 5

The statement ``bulk_insert`` sends for 2,500 one-shots (captured from the code, as
``create_ceiling.py`` does), run 40 times in one transaction (100,000 rows, fresh ids each
time, tables emptied before each variant), in alternating rounds, against:

- ``no audit jsonb``: the audit events' ``payload`` and ``metadata`` as ``'{}'`` (what
  building them costs);
- ``no audit events``: the schedules alone;
- ``payload as text``: the payload and metadata built in Python as JSON text (the same
  content) and parsed by the server (``::jsonb``), joined to the inserted rows by id;
- ``json_build_object``: the payload built as ``json`` (text) and stored as ``jsonb``;
- ``flat definition``: one ``jsonb_build_object`` of all 19 definition fields per row
  instead of the shared fields built once and joined (``||``) to the per-row ones;
- ``returning some``: ``RETURNING`` only the columns the audit event and the read-back use;
- ``sparse definition``: the definition without the fields the items share (a smaller
  record than the package stores: how the record's size weighs).

Prints rows per second per variant (medians of ``--rounds``). Runs against the
``dsched_create_bench`` database, as create_bench.py does; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import create_bench as bench
from create_ceiling import ROWS, STATEMENTS, capture_bulk
from django.core.management import call_command
from django.db import connection, transaction

from django_dsched.runtime import binding

PER_ROW = "'schedule_name', c.schedule_name, 'start_ts', c.start_ts, 'event_data', c.event_data)"
SHARED = "(SELECT jsonb_build_object('schedule_kind'"
PAYLOAD = "jsonb_build_object('actor', %(actor_)s::text, 'at', c.created_ts,"
METADATA = """jsonb_build_object('actor', %(actor_)s::text, 'schedule_name', c.schedule_name,
                                   'origin', c.origin)"""
BACK = '\n        SELECT c."schedule_id", c."start_ts", c."bucket_key", c."created_ts" FROM c'


def variants(sql: str) -> dict[str, str]:
    """The statement and its variants (see the module's docstring)."""
    audit_at = sql.index("), audit AS (")
    payload_at = sql.index(PAYLOAD)
    audit_end = sql.index("FROM c\n        )")
    shared_at = sql.index(SHARED)
    per_row_at = sql.index(PER_ROW)
    shared_pairs = sql[shared_at + len("(SELECT jsonb_build_object(") : per_row_at]
    shared_pairs = shared_pairs[: shared_pairs.rindex("))")]
    joined = f"""{sql[:audit_at]}), audit AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type,
        aggregate_version, event_type, event_ts, payload, metadata)
    SELECT gen_random_uuid(), c.host_id, c.schedule_id, 'Schedule',
        c.aggregate_version, %(event_type_)s, c.created_ts, p.pl::jsonb, p.md::jsonb
    FROM c JOIN unnest(%(a0)b::uuid[], %(pl_)b::text[], %(md_)b::text[]) AS p(id, pl, md)
        ON p.id = c.schedule_id
){BACK}"""
    rest = sql[per_row_at + len(PER_ROW) :]
    returned = "schedule_id, host_id, aggregate_version, created_ts, schedule_name, origin, "
    return {
        "the statement": sql,
        "no audit jsonb": f"{sql[:payload_at]}'{{}}'::jsonb, '{{}}'::jsonb\n{sql[audit_end:]}",
        "no audit events": f"{sql[:audit_at]}){BACK}",
        "payload as text": joined,
        "json_build_object": sql.replace(PAYLOAD, "json_build_object" + PAYLOAD[18:], 1),
        "flat definition": f"{sql[:shared_at]}jsonb_build_object({shared_pairs}, {PER_ROW}{rest}",
        "returning some": sql.replace(
            "RETURNING *", f"RETURNING {returned}start_ts, event_data, bucket_key"
        ),
        "sparse definition": sql[:shared_at] + sql[per_row_at - len("jsonb_build_object(") :],
    }


def texts(params: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The payload and metadata of each row as JSON text, for ``payload as text``."""
    shared = {
        "schedule_kind": "ONCE",
        "frequency_unit": "",
        "frequency_time": None,
        "cron_expression": "",
        "time_zone": "UTC",
        "end_ts": None,
        "max_fires": None,
        "misfire_policy": "COALESCE",
        "misfire_grace_seconds": None,
        "catch_up_limit": 100,
        "jitter_seconds": 0,
        "priority": 0,
        "event_topic": params["event_topic"],
        "event_type": params["event_type"],
        "origin": "API",
        "idempotency_key": None,
    }
    at = "2026-01-01T00:00:00.123456+00:00"
    payloads, metadata = [], []
    for name, data in zip(params["a1"], params["a2"], strict=True):
        definition = {**shared, "schedule_name": name, "start_ts": at}
        payloads.append(
            f'{{"actor": "system", "at": "{at}", "definition": '
            f'{json.dumps(definition)[:-1]}, "event_data": {data}}}}}'
        )
        metadata.append(json.dumps({"actor": "system", "schedule_name": name, "origin": "API"}))
    return payloads, metadata


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    call_command("migrate", verbosity=0)
    bench.reset()
    sql, params = capture_bulk()

    def fresh() -> dict[str, Any]:
        ids = [uuid.uuid4() for _n in range(ROWS)]
        batch = {**params, "a0": ids, "a1": [str(i) for i in ids]}
        batch["pl_"], batch["md_"] = texts(batch)
        return batch

    statements = variants(sql)
    rates: dict[str, list[float]] = {name: [] for name in statements}
    for _round in range(rounds):
        for name, statement in statements.items():
            bench.reset()
            batches = [fresh() for _n in range(STATEMENTS)]
            started = time.perf_counter()
            with transaction.atomic(), binding.cursor(connection) as cursor:
                for batch in batches:
                    cursor.execute(statement, batch)
                    cursor.fetchall()
            rates[name].append(ROWS * STATEMENTS / (time.perf_counter() - started))
    bench.reset()
    base = statistics.median(rates["the statement"])
    for name, runs in rates.items():
        median = statistics.median(runs)
        shown = ", ".join(f"{rate:,.0f}" for rate in runs)
        print(f"{name}: median {median:,.0f} rows/s, x{median / base:.2f}  (runs: {shown})")


if __name__ == "__main__":
    main()
