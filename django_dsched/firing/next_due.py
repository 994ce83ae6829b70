"""When to look again: the next due time, after a claim that came back short."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django_dsched.conf import app_settings
from django_dsched.firing.claim import IN_BUCKETS, NOT_HELD, NOT_HELD_BACK, NOT_QUARANTINED
from django_dsched.firing.fence import Fence, bucket_params

# Run in the transaction of a claim that came back short: transaction_timestamp() is then
# no later than the claim, so an active row due by then that is still due was skipped
# because another transaction holds its lock (an admin save, an API call). The next due
# time is taken among the rows not yet due then, so such a row never reads as "due now".
# A row whose slot is held for a run still going (NOT_HELD) is due but waits for that run,
# not for a lock: the next poll looks at it again.
NEXT_DUE = f"""
SELECT extract(epoch FROM (SELECT min(next_run_ts) FROM schedule_t
                           WHERE active AND next_run_ts > transaction_timestamp()
                             AND next_run_ts < 'infinity'{{bucket_filter}}) - clock_timestamp()),
       EXISTS (SELECT FROM schedule_t WHERE active AND next_run_ts <= transaction_timestamp()
                                            {{bucket_filter}}{{skip_filter}} AND {NOT_HELD})
"""
NEXT_DUE_BUCKETS = NEXT_DUE.format(bucket_filter=f" AND {IN_BUCKETS}", skip_filter="")
NEXT_DUE_BUCKETS_SKIPPING = NEXT_DUE.format(
    bucket_filter=f" AND {IN_BUCKETS}", skip_filter=f" AND {NOT_QUARANTINED}"
)
NEXT_DUE_SKIPPING = NEXT_DUE.format(bucket_filter="", skip_filter=f" AND {NOT_QUARANTINED}")
# With held-back hosts (their rows are due but wait for tokens, not for a lock): (buckets,
# skip) -> the statement.
NEXT_DUE_HOLDING = {
    (buckets, skip): NEXT_DUE.format(
        bucket_filter=f" AND {IN_BUCKETS}" if buckets else "",
        skip_filter=(f" AND {NOT_QUARANTINED}" if skip else "") + f" AND {NOT_HELD_BACK}",
    )
    for buckets in (False, True)
    for skip in (False, True)
}
NEXT_DUE = NEXT_DUE.format(bucket_filter="", skip_filter="")


@dataclass(frozen=True, slots=True)
class NextDue:
    seconds: float | None  # until the next schedule falls due (database clock); None: none
    locked: bool  # a due schedule was skipped: another transaction holds its row


def next_due(
    cursor: Any,
    fence: Fence | None = None,
    skip: Collection[str] = (),
    held_back: Collection[str] = (),
) -> NextDue:
    """When to look again; call it in the transaction of the last (short) claim (with
    buckets: among the buckets ``fence`` holds; ``skip``: quarantined ids, and
    ``held_back``: hosts over their fire rate, whose rows are due but not waiting on a
    lock)."""
    some = fence is not None and 1 < fence.bucket_count != len(fence.buckets)
    params: dict[str, Any] = {"worker_timeout": app_settings.OVERLAP_WORKER_TIMEOUT}
    if some and fence is not None:
        params.update(bucket_params(fence))
    if held_back:
        params.update(held_back=list(held_back), skip=list(skip))
        cursor.execute(NEXT_DUE_HOLDING[some, bool(skip)], params)
    elif some:
        if skip:
            cursor.execute(NEXT_DUE_BUCKETS_SKIPPING, {**params, "skip": list(skip)})
        else:
            cursor.execute(NEXT_DUE_BUCKETS, params)
    elif skip:
        cursor.execute(NEXT_DUE_SKIPPING, {**params, "skip": list(skip)})
    else:
        cursor.execute(NEXT_DUE, params)
    delay, locked = cursor.fetchone()
    return NextDue(None if delay is None else float(delay), bool(locked))
