"""The overlap policies on the fire path (docs/overlap.md): what a due slot does while its
schedule's previous run is still going, and the statements that write it.

An ALLOW_ALL row (the default) never comes here: the claim returns NULL for it without a
probe (:data:`.claim.OVERLAP`), ``plan()`` plans it as before, and none of the statements
below runs for a batch of such rows. For any other row the claim returns its policy, the run
its slot is held for, and its previous run (the newest message) with whether it is going
(:func:`django_dsched.models.overlap.going`: a dead relay or worker stops counting after the
visibility timeout, or ``DSCHED_OVERLAP_WORKER_TIMEOUT``). :func:`decide_overlap` then:

- the previous run is over, nothing held: the slot is planned as any other (its misfire
  policy);
- the previous run was never attempted (no relay claimed it), CANCEL_OTHER, and the slot
  fires: :data:`CANCEL_RUNS` deletes its message in the batch's transaction before the fire
  is written (the event stays) and the fire is audited ``dsched.schedule.run_cancelled``; a
  message a relay claimed meanwhile is not deleted, and the slot is held instead;
- the previous run is over, a slot held: the hold is released and the policy picks the slot
  that fires: BUFFER_ONE the held slot (then the schedule goes on from now: the slots that
  came due meanwhile are dropped), BUFFER_ALL the oldest of the last
  ``DSCHED_OVERLAP_BUFFER_LIMIT`` slots (the rest fire in the next rounds, each once its
  predecessor ended), CANCEL_OTHER the newest. A slot older than the catch-up window (the
  misfire grace) is dropped too. Dropped slots: ``skip_count`` and ``dsched.schedule.skipped``;
- the previous run goes, SKIP: the slot the misfire policy would fire is not fired, the
  schedule goes on from the next one (``skip_count``, ``dsched.schedule.skipped``);
- the previous run goes, BUFFER_ONE, BUFFER_ALL or CANCEL_OTHER: the slot is held. It stays
  the schedule's next slot (``next_run_ts`` unchanged, still due: the buffer is the
  timetable's slots from it on, nothing stored but ``held_by``); the claim passes over the
  row while that run goes (:data:`.claim.NOT_HELD`) and takes it again at the first claim
  after (``buffer_count``, ``dsched.schedule.buffered``).

A buffered fire is the fire of its own slot by the same statement as any other
(:mod:`.write`), so it has the slot's event id and the database still refuses a second.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus, MisfirePolicy, OverlapPolicy
from django_dsched.firing.fence import AUDIT_METADATA, FENCE, with_buckets
from django_dsched.history import event_ids
from django_dsched.models.overlap import GOING, QUEUED
from django_dsched.runtime.arrays import array_literal
from django_dsched.timetables import Decision, Rules, Timetable, decide, first_slot

# The audit events' verbs (dsched.schedule.<verb>).
SKIPPED, BUFFERED, RUN_CANCELLED = "skipped", "buffered", "run_cancelled"
# More slots than any catch-up can have: BUFFER_ONE fires the held slot however old.
_UNBOUNDED = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Previous:
    """A row's overlap column (:data:`.claim.OVERLAP`)."""

    policy: str
    held_by: str | None  # the run its next slot is held for
    run: str | None  # the newest message's id
    state: str  # FREE, GOING or QUEUED (models/overlap.run_state)

    @property
    def going(self) -> bool:
        return self.state in (GOING, QUEUED)


def previous(column: Sequence[str | None]) -> Previous:
    policy, held_by, run, state = column
    assert policy is not None and state is not None
    return Previous(policy, held_by, run, state)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an overlap policy makes of a due row: a decision for the batch's WRITE (None:
    nothing fires and WRITE leaves the row alone) and what :data:`OVERLAP` writes."""

    decision: Decision | None
    verb: str | None = None  # the audit event's (None: no event)
    held: str | None = None  # held_by after this batch
    advance: Decision | None = None  # a skip: the next slot it moves to
    skipped: bool = False
    buffered: bool = False
    slot: datetime | None = None  # the slot the event is about
    run: str | None = None  # the run the event names
    step: bool = True  # whether OVERLAP writes anything
    cancel: bool = False  # fires if CANCEL_RUNS withdraws ``run`` first, else is held


def decide_overlap(
    table: Timetable,
    rules: Rules,
    prev: Previous,
    next_slot: datetime,
    now: datetime,
    fire_count: int,
    window: timedelta | None,
) -> Outcome:
    """What the overlap policy ``prev.policy`` makes of a row due at ``next_slot``."""
    if not prev.going:
        if prev.held_by is not None:
            return _release(table, rules, prev, next_slot, now, fire_count, window)
        decision = decide(table, rules, next_slot, now, fire_count, window)
        return Outcome(decision, step=False)
    if prev.policy == OverlapPolicy.SKIP:
        decision = decide(table, rules, next_slot, now, fire_count, window)
        if decision.slot is None:  # nothing would fire now anyway
            return Outcome(decision, step=prev.held_by is not None)
        return Outcome(
            None, SKIPPED, advance=decision, skipped=True, slot=decision.slot, run=prev.run
        )
    if prev.held_by is not None:
        # A newer run than the one the slot was held for goes (a run now): wait for it.
        return Outcome(None, held=prev.run)
    if prev.policy == OverlapPolicy.CANCEL_OTHER and prev.state == QUEUED:
        # Never attempted: withdrawn if it is still so when the batch writes (CANCEL_RUNS),
        # and the slot fires; else the slot is held (Plan.hold_instead). Only for a fire.
        decision = decide(table, rules, next_slot, now, fire_count, window)
        if decision.slot is None:
            return Outcome(decision, step=False)
        return Outcome(decision, RUN_CANCELLED, slot=decision.slot, run=prev.run, cancel=True)
    return Outcome(None, BUFFERED, held=prev.run, buffered=True, slot=next_slot, run=prev.run)


def _release(
    table: Timetable,
    rules: Rules,
    prev: Previous,
    next_slot: datetime,
    now: datetime,
    fire_count: int,
    window: timedelta | None,
) -> Outcome:
    """The run a slot was held for is over: the slot the policy fires now."""
    policy = prev.policy
    if policy == OverlapPolicy.BUFFER_ALL:
        limit = max(1, int(app_settings.OVERLAP_BUFFER_LIMIT))
        decision = decide(
            table,
            dataclasses.replace(rules, policy=MisfirePolicy.CATCH_UP, catch_up_limit=limit),
            next_slot,
            now,
            fire_count,
            window,
        )
    elif policy == OverlapPolicy.CANCEL_OTHER:  # the newest slot wins
        coalesce = dataclasses.replace(rules, policy=MisfirePolicy.COALESCE)
        decision = decide(table, coalesce, next_slot, now, fire_count, timedelta(0))
    elif policy == OverlapPolicy.BUFFER_ONE:
        decision = _held_then_now(table, rules, next_slot, now, fire_count, window)
    else:  # a hold its policy no longer has (SKIP): as usual
        decision = decide(table, rules, next_slot, now, fire_count, window)
    if not decision.missed:
        return Outcome(decision)
    first = next_slot if decision.slot != next_slot else table.slot_after(next_slot)
    return Outcome(
        dataclasses.replace(decision, missed=False),
        SKIPPED,
        skipped=True,
        slot=first,
        run=prev.held_by,
    )


def _held_then_now(
    table: Timetable,
    rules: Rules,
    next_slot: datetime,
    now: datetime,
    fire_count: int,
    window: timedelta | None,
) -> Decision:
    """BUFFER_ONE's release: the held slot (unless older than the catch-up window), then
    the first slot that runs from now on: those that came due while it waited are dropped."""
    catch_up = dataclasses.replace(rules, policy=MisfirePolicy.CATCH_UP, catch_up_limit=_UNBOUNDED)
    held = decide(table, catch_up, next_slot, now, fire_count, window)
    if held.slot is None or held.next_slot is None:
        return held
    after = first_slot(table, rules, now)
    if after is None or after > held.next_slot:
        return Decision(held.slot, after, True)
    return held


@dataclass(frozen=True, slots=True)
class Step:
    """One row's write by :data:`OVERLAP` (times in microseconds)."""

    schedule_id: str
    verb: str | None
    held: str | None
    advance: bool = False
    next_slot: int | None = None
    next_run: int | None = None
    state: str | None = None
    skipped: bool = False
    buffered: bool = False
    missed: bool = False
    slot: int | None = None
    run: str | None = None


# Each step's row: its next slot when the step moves it (a skip), the run it is held for,
# the counts, and an audit event on its version sequence when the step has a verb; under the
# batch's fence, after its WRITE (a released row was fired by WRITE first).
OVERLAP = f"""
WITH {FENCE},
steps AS MATERIALIZED (
    UPDATE schedule_t s
    SET next_slot_ts = CASE WHEN u.advance THEN 'epoch'::timestamptz
                                                + u.next_slot * interval '1 microsecond'
                            ELSE s.next_slot_ts END,
        next_run_ts = CASE WHEN u.advance THEN 'epoch'::timestamptz
                                               + u.next_run * interval '1 microsecond'
                           ELSE s.next_run_ts END,
        state = CASE WHEN u.advance THEN u.state ELSE s.state END,
        active = CASE WHEN u.advance THEN u.state = %(active)s ELSE s.active END,
        held_by = u.held,
        skip_count = s.skip_count + u.skipped::int,
        buffer_count = s.buffer_count + u.buffered::int,
        misfire_count = s.misfire_count + u.missed::int,
        aggregate_version = s.aggregate_version + (u.verb IS NOT NULL)::int
    FROM unnest(%(ids)s::uuid[], %(verbs)s::text[], %(held)s::uuid[], %(advance)s::boolean[],
                %(next_slots)s::bigint[], %(next_runs)s::bigint[], %(states)s::text[],
                %(skipped)s::boolean[], %(buffered)s::boolean[], %(missed)s::boolean[],
                %(slots)s::bigint[], %(runs)s::uuid[])
         AS u(id, verb, held, advance, next_slot, next_run, state, skipped, buffered, missed,
              slot, run)
    WHERE s.schedule_id = u.id AND s.schedule_id = ANY(%(ids)s::uuid[])
      AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.origin, s.aggregate_version,
              s.overlap_policy, s.next_slot_ts, s.bucket_key, u.verb, u.slot, u.run
),
audit AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, leader_epoch)
    SELECT {event_ids.change_sql("statement_timestamp()")}, host_id, schedule_id, 'Schedule',
           aggregate_version, 'dsched.schedule.' || verb, statement_timestamp(),
           jsonb_build_object(
               'actor', 'scheduler',
               'at', statement_timestamp(),
               'policy', overlap_policy,
               'slot', 'epoch'::timestamptz + slot * interval '1 microsecond',
               'run', run,
               'next', next_slot_ts),
           {AUDIT_METADATA},
           %(epoch)s
    FROM steps
    WHERE verb IS NOT NULL
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM steps)
"""
OVERLAP_BUCKETS = with_buckets(OVERLAP)

# CANCEL_OTHER: the previous runs never attempted (pending, no claim ever) are withdrawn
# before the batch is planned: their messages are deleted, so no relay delivers them (their
# events stay, and their slots can never fire again). A message a relay is claiming at this
# moment is passed over (SKIP LOCKED: the fire path never waits for a relay), and so is one
# claimed since the claim read it: those slots are held instead.
CANCEL_RUNS = f"""
WITH {FENCE},
gone AS (
    DELETE FROM outbox_message_t o
    WHERE o.id IN (SELECT c.id FROM outbox_message_t c
                   WHERE c.id = ANY(%(runs)s::uuid[]) AND c.status = %(pending)s
                     AND c.attempts = 0
                   FOR UPDATE SKIP LOCKED)
      AND o.id = ANY(%(runs)s::uuid[]) AND EXISTS (SELECT FROM fence)
    RETURNING o.id
)
SELECT (SELECT count(*) FROM fence), (SELECT array_agg(id::text) FROM gone)
"""
CANCEL_RUNS_BUCKETS = with_buckets(CANCEL_RUNS)


def cancel_params(runs: list[str]) -> dict[str, Any]:
    return {"runs": array_literal(runs), "pending": DeliveryStatus.PENDING.value}


def step_arrays(steps: Sequence[Step]) -> dict[str, str]:
    """:data:`OVERLAP`'s per-row arrays."""

    def column(name: str) -> str:
        return array_literal([getattr(step, name) for step in steps])

    return {
        "ids": column("schedule_id"),
        "verbs": column("verb"),
        "held": column("held"),
        "advance": column("advance"),
        "next_slots": column("next_slot"),
        "next_runs": column("next_run"),
        "states": column("state"),
        "skipped": column("skipped"),
        "buffered": column("buffered"),
        "missed": column("missed"),
        "slots": column("slot"),
        "runs": column("run"),
    }
