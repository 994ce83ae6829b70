"""What the relay benchmarks read from a claim's ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``:
its time, the buffers it touched, the rows its scans of ``outbox_message_t`` read (those
they kept and those their filters removed) and which scans those were."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    ms: float
    buffers: int
    rows_read: int
    scans: str


def summarize(raw: Any) -> Plan:
    """``raw``: the one value EXPLAIN (FORMAT JSON) returns (text or already decoded)."""
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]

    def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from walk(child)

    scans = [
        n
        for n in walk(plan["Plan"])
        if n.get("Relation Name") == "outbox_message_t" and "Scan" in n["Node Type"]
    ]
    rows = sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in scans
    )
    names = sorted({f"{n['Node Type']} {n.get('Index Name', '')}".strip() for n in scans})
    top = plan["Plan"]
    return Plan(
        plan["Execution Time"],
        top["Shared Hit Blocks"] + top["Shared Read Blocks"],
        rows,
        "; ".join(names),
    )
