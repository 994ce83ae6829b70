"""The fire path: claim due schedules and fire a batch of them in one transaction.

This is the product's hot loop, so it is set-based SQL on the raw connection. Per batch:

1. ``claim`` (:mod:`.claim`): ``SELECT ... FOR UPDATE SKIP LOCKED`` the oldest due
   schedules (the database's clock, ``statement_timestamp()``, decides what is due, and is
   returned with the rows).
2. ``plan`` (:mod:`.plan`): Python computes each schedule's fire slot and next run with
   :mod:`django_dsched.timetables`, the same code the admin and the API use, within a time
   budget (rows it has no time for are left as they are and taken by the next batch). A
   row that cannot be planned (a zone this host does not know, a cron croniter refuses) is
   set aside with its error, in the same transaction; the rest of the batch fires.
3. ``write`` (:mod:`.write`): one statement checks the fence (:mod:`.fence`: this instance
   still holds the unexpired lease at its epoch, taken ``FOR SHARE`` so nobody can take the
   lease until we commit), advances every schedule (``UPDATE ... RETURNING`` the columns the
   event needs), and inserts every event and outbox row from what the update returned. The
   payload is built in SQL from the locked rows, so event data never round-trips through
   Python. It is stored once, in the event: the outbox row reads it by the shared id.

If the fence fails the statement writes nothing and the caller rolls back and steps down.
A second event for the same (schedule, slot) is refused by the database (a unique index on
(aggregate_id, scheduled_ts) in each partition of ``event_store_t``: see
``django_dsched.history.partitions``); a fire's id is a function of (schedule, slot), so the
write skips such a row (``ON CONFLICT DO NOTHING``, under the primary key or that index)
instead of failing the batch.
Any other refusal (another constraint, a trigger, a value out of range) fails the write:
the caller rolls the batch back and runs it again with ``narrow=True``, which writes it in
halves under savepoints until the refused rows are found, sets them aside with the
database's error and fires the rest in the same transaction (:func:`fire_batch`).
Event ids are a function of (schedule, slot) (:mod:`django_dsched.history.event_ids`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django_dsched.enums import DeliveryStatus
from django_dsched.firing import fates
from django_dsched.firing.calendared import batch_calendars
from django_dsched.firing.claim import CALENDARS, CLAIMS, claim_args
from django_dsched.firing.fence import Fence, bucket_params, fence_params, touched_buckets
from django_dsched.firing.plan import ACTIVE, COMPLETED, Plan, plan
from django_dsched.firing.throttle import Throttle
from django_dsched.firing.write import WRITE, WRITE_BUCKETS, Writer

# Batches up to this size report the names of what fired (for the logs).
NAMED_BATCH = 10


@dataclass(frozen=True, slots=True)
class BatchResult:
    claimed: int
    fired: int
    duplicates: int
    fenced: bool
    names: str | None = None
    set_aside: int = 0
    # The rows set aside and why: (schedule id, error).
    aside: tuple[tuple[str, str], ...] = ()
    # Claimed rows left for the next batch (the planning budget ran out) and fired rows
    # still due (a catch-up's next slot): either way there is more to do at once.
    deferred: int = 0
    again: int = 0
    # For metrics (docs/observability.md): the write's database time (microseconds), the
    # slots it wrote (microseconds; None for a row that did not fire), how many rows missed
    # slots and the fires per topic (these two with ``BatchOptions(metrics=True)``).
    written_us: int | None = None
    slots: Sequence[int | None] = ()
    misfired: int = 0
    topics: dict[str, int] | None = None
    # With ``narrow=True``: rows whose fire the database refused (set aside, in ``aside``
    # too), and rows it refused to set aside as well (left active: the caller quarantines
    # them). Each with the database's error.
    refused: tuple[tuple[str, str], ...] = ()
    quarantined: tuple[tuple[str, str], ...] = ()
    # The claim's database time (microseconds) and the rows due again at once: the
    # ``since_us`` and ``again`` of the next batch.
    claimed_at: int | None = None
    again_ids: tuple[str, ...] = ()
    # Claimed rows left unplanned because their host was over its fire rate (no token):
    # released at commit, claimed again once it has tokens.
    throttled: int = 0
    # The overlap policies (firing/overlap.py): slots skipped and held because the previous
    # run was still going, and previous runs cancelled (CANCEL_OTHER).
    skipped: int = 0
    buffered: int = 0
    cancelled: int = 0
    # Slots that calendars dropped (excluded) or moved (shifted), by fate, for metrics.
    calendar_fates: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """How :func:`fire_batch` runs one batch (the defaults: whatever is due, no budget)."""

    # Planning stops at this monotonic time: what is planned is written, the rest is left
    # for the next batch.
    deadline: float | None = None
    # Called before the write: may renew the lease (inside the batch's transaction); False
    # means the lease is lost.
    keep_lease: Callable[[], bool] | None = None
    # Also count the fires per topic and the rows that missed slots (docs/observability.md).
    metrics: bool = False
    # After a refused write: write under savepoints, narrowing down to the refused rows.
    narrow: bool = False
    # Ids the claim passes over (the caller's quarantine).
    skip: Collection[str] = ()
    # On-time work first: the ``claimed_at`` and ``again_ids`` of the caller's previous
    # batch that claimed any.
    since_us: int | None = None
    again: Collection[str] = ()
    # The hosts' fire rates (:mod:`.throttle`).
    throttle: Throttle | None = None


DEFAULTS = BatchOptions()


def fire_batch(
    cursor: Any, fence: Fence, batch_size: int, options: BatchOptions = DEFAULTS
) -> BatchResult:
    """Claim and fire up to ``batch_size`` due schedules inside the caller's transaction.

    Planning stops at ``options.deadline``; before writing, ``options.keep_lease()`` may
    renew the lease. The caller owns the transaction: it commits when ``fenced`` is False
    and rolls back otherwise.

    A row the database refuses (a constraint, a trigger) fails the whole write. The caller
    then rolls back and calls again with ``narrow=True``: the set-aside and the write run
    under savepoints, a refused write is split in halves until each refused row is alone,
    and those rows are set aside with the database's error while the rest fires
    (``refused``); a row the database will not even set aside is reported in
    ``quarantined`` for the caller to pass over (``skip``: ids the claim passes over).

    On-time work first: the rows ``again`` (the previous batch's ``again_ids``) and the rows
    that came due after ``since_us`` (the ``claimed_at`` of the caller's previous batch that
    claimed any; None: one backlog window ago) are claimed before the rows due earlier,
    which fill the rest of the batch (:func:`~.claim.claim_statement`).

    ``throttle``: the hosts' fire rates (:mod:`.throttle`). The claim passes over the hosts
    it holds back, and a claimed row whose host has no token left is not planned
    (``throttled``): unchanged, it is released at commit and claimed again later.
    """
    bucketed = fence.bucket_count > 1
    throttle = options.throttle
    hosts = throttle is not None and throttle.active
    params: dict[str, Any] = {**fence_params(fence), "active": ACTIVE, "completed": COMPLETED}
    held_back = throttle.held_back() if hosts and throttle is not None else ()
    claim_params = claim_args(batch_size, options.since_us, options.skip, options.again, held_back)
    if bucketed:
        if not fence.buckets:
            return BatchResult(0, 0, 0, False)
        params.update(bucket_params(fence), limit=batch_size)
        rows = _claim_in_buckets(cursor, fence, params, claim_params, bool(options.skip), hosts)
    else:
        cursor.execute(CLAIMS[False, False, bool(options.skip), hosts], claim_params)
        rows = cursor.fetchall()
    if not rows:
        return BatchResult(0, 0, 0, False)
    claimed = len(rows)
    claimed_at = rows[0][6]
    throttled = 0
    if hosts and throttle is not None:
        # One token per row (a row fires one slot per batch at most); the others wait.
        ready = [row[:-1] for row in rows if throttle.take(row[-1])]
        throttled = claimed - len(ready)
        rows = ready
    # The calendars the rows name, read once for the batch (none: nothing read).
    decided = plan(rows, options.deadline, batch_calendars([row[CALENDARS] for row in rows]))
    if options.keep_lease is not None and not options.keep_lease():
        return BatchResult(claimed, 0, 0, True)
    writer = Writer(cursor, params, bucketed, options.narrow)
    if decided.aside and not writer.set_aside(decided.aside):
        return BatchResult(claimed, 0, 0, True)
    if decided.cancels and not _cancel_runs(writer, decided):
        return BatchResult(claimed, 0, 0, True)
    if decided.ids:
        write = WRITE_BUCKETS if bucketed else WRITE
        params.update(
            pending=DeliveryStatus.PENDING.value,
            names=claimed <= NAMED_BATCH,
            topics=options.metrics,
        )
        if not writer.write(write, decided):
            return BatchResult(claimed, 0, 0, True)
    if decided.steps and not writer.steps(decided.steps):
        return BatchResult(claimed, 0, 0, True)
    if writer.refused and not writer.set_aside(writer.refused):
        return BatchResult(claimed, 0, 0, True)
    if decided.fates.ids and not fates.record(writer, decided.fates):
        return BatchResult(claimed, 0, 0, True)
    return _result(writer, decided, claimed, claimed_at, throttled, options.metrics)


def _cancel_runs(writer: Writer, decided: Plan) -> bool:
    """Withdraw the previous runs CANCEL_OTHER's fires replace (firing/overlap.py,
    ``CANCEL_RUNS``), before the fires are written; a run a relay claimed meanwhile stays,
    and its fire becomes a hold. False: the fence failed."""
    runs = {schedule_id: run for schedule_id, run, _slot in decided.cancels}
    gone = writer.cancel(list(runs.values()))
    if gone is None:
        return False
    kept = {schedule_id: run for schedule_id, run in runs.items() if run not in gone}
    if kept:
        decided.hold_instead(kept)
    return True


def _claim_in_buckets(
    cursor: Any,
    fence: Fence,
    params: dict[str, Any],
    claim_params: dict[str, Any],
    skip: bool,
    hosts: bool,
) -> list[tuple[Any, ...]]:
    """The claim among the buckets ``fence`` holds (its rows without their bucket key);
    ``params`` gets the fence of the buckets the rows are in."""
    every = len(fence.buckets) == fence.bucket_count
    cursor.execute(CLAIMS[True, every, skip, hosts], {**params, **claim_params})
    keyed = cursor.fetchall()
    mask = fence.bucket_count - 1
    params.update(touched_buckets(fence, sorted({row[-1] & mask for row in keyed})))
    return [row[:-1] for row in keyed]


def _result(
    writer: Writer,
    decided: Plan,
    claimed: int,
    claimed_at: int | None,
    throttled: int,
    metrics: bool,
) -> BatchResult:
    """What a batch that kept its fence did."""
    return BatchResult(
        claimed,
        writer.fired,
        writer.due_fires - writer.fired,
        False,
        ", ".join(writer.names) or None,
        set_aside=writer.set_aside_count,
        aside=tuple(writer.aside),
        deferred=decided.deferred,
        again=decided.again,
        written_us=writer.written_us,
        slots=decided.slots,
        misfired=decided.missed.count(True) if metrics else 0,
        topics=writer.topics or None,
        refused=tuple(writer.refused),
        quarantined=tuple(writer.quarantined),
        claimed_at=claimed_at,
        again_ids=tuple(decided.again_ids),
        throttled=throttled,
        skipped=decided.skipped,
        buffered=decided.buffered,
        cancelled=decided.cancelled,
        calendar_fates=decided.fates.counts or None,
    )
