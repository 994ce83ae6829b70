"""Finding the outbox rows the database refuses, so that one cannot stop the others' delivery.

The relay writes a batch's rows in one statement (its claim, a renewal's ``EXTEND``, a
stopping relay's ``RELEASE``): one round trip however large the batch. A row can refuse such
a write for a reason of its own (a CHECK ... NOT VALID or a trigger an operator added, a
value out of a column's range); the statement then fails as a whole, for every message of
the batch, other tenants' included, and would fail again at every try.

So when one fails with a refusal of a row's data
(:func:`~django_dsched.runtime.refusals.refused`), it runs again in one transaction, in halves
under savepoints, until each refused row is alone
(:func:`~django_dsched.runtime.narrowing.halves`, as the fire path finds a refused schedule);
the other rows are written as before. What becomes of a refused row:

* a claim (:func:`claim_narrowed`): the batch is chosen and locked as the claim chooses it,
  then claimed in halves; a refused message is dead-lettered with the database's error
  (:data:`DEAD_REFUSED`, its times made storable: ``models/times.py``), and one the database
  will not even dead-letter is returned, for the relay to pass over for a while
  (:mod:`.quarantine`). The claim threads run the same claim (``Relay._claim``).
* a renewal or a release (:mod:`.holding`): a refused claim is neither renewed (nor sent)
  nor given back; it expires after the visibility timeout.

Nothing more runs when nothing is refused. Connection errors and other database errors are
not caught here: they reach the relay's reconnect path.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, connections, transaction

from django_dsched.models.times import OUTBOX_TIMES, held, storable
from django_dsched.outbox.claims import (
    CLAIM_RETURNING,
    CLAIM_SET,
    ERROR_MAX_CHARS,
    ON_TIME_WINDOW,
    PAYLOAD,
    chosen,
    claim_args,
    claim_settings,
    claimed,
    in_range,
    pending_ids,
)
from django_dsched.outbox.messages import Claimed, Claimer
from django_dsched.runtime import binding
from django_dsched.runtime.loops import bound_transaction
from django_dsched.runtime.narrowing import halves
from django_dsched.runtime.refusals import refused

T = TypeVar("T")
R = TypeVar("R")

# The claim's choice alone: the rows it would take (locked until the transaction ends), each
# with its place in the batch and its payload's bytes.
CHOOSE = {
    (skip, held): f"{chosen(skip, held)}\nSELECT c.id, c.n, c.bytes FROM candidates c"
    for skip in (False, True)
    for held in (False, True)
}

# The claim of chosen rows (``%(ids)s``, with their places and bytes), as the claim writes
# and returns them.
CLAIM_CHOSEN = f"""
UPDATE outbox_message_t m
{CLAIM_SET}
FROM unnest(%(ids)s::uuid[], %(places)s::bigint[], %(sizes)s::bigint[]) AS c(id, n, bytes)
CROSS JOIN LATERAL (SELECT {PAYLOAD}::text AS body) l
WHERE m.id = c.id AND m.status = %(pending)s AND {in_range("m")}
{CLAIM_RETURNING}
"""

# A message the database refused to claim, dead-lettered with that error (and its times made
# storable, what they held named), returned as the claim returns a dead letter.
DEAD_REFUSED = f"""
UPDATE outbox_message_t m
SET status = %(dead)s, claimed_by = '', claimed_until = NULL, failed_ts = clock_timestamp(),
    last_error = left(%(error)s || COALESCE(' (' || NULLIF({held("m", OUTBOX_TIMES)}, '') || ')',
                                            ''),
                      {ERROR_MAX_CHARS}),
    {", ".join(
        f"{c} = {storable(f'm.{c}', nullable=c != 'event_ts')}"
        for c in OUTBOX_TIMES if c not in ("claimed_until", "failed_ts")
    )}
WHERE m.id = %(id)s AND m.status = %(pending)s
RETURNING m.id, m.topic, m.event_type, NULL::text, m.attempts, m.priority, m.status,
          0::bigint, 0::bigint, (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
          m.host_id, m.last_error, 0::float8
"""  # fmt: skip


def narrowed(
    using: str, run: Callable[[list[T]], list[R]], items: list[T]
) -> tuple[list[R], list[tuple[T, str]]]:
    """``run(items)`` as it is (autocommit: one statement); if the database refuses a row's
    data, :func:`halves` in one transaction."""
    try:
        return run(items), []
    except DatabaseError as exc:
        if not refused(exc) or connections[using].in_atomic_block:
            raise  # not a row's fault; or the caller's transaction is aborted
    with transaction.atomic(using=using):
        return halves(using, run, items)


def claim_narrowed(
    using: str,
    claimer: Claimer,
    limit: int,
    max_bytes: int | None,
    since_us: int | None,
    skip: Sequence[uuid.UUID] = (),
    held_back: Sequence[str] = (),
    rotate: int = 0,
) -> tuple[Claimed, list[tuple[uuid.UUID, str]]]:
    """The claim :func:`~.claims.claim_batch` would make, after the database refused it:
    the batch chosen and locked, claimed in halves, each refused message dead-lettered with
    the database's error. Returns the claim, and the messages the database refused to
    dead-letter too (each with its error: the caller passes over them for a while)."""
    connection = connections[using]
    args = claim_args(claimer, limit, max_bytes, since_us, ON_TIME_WINDOW, skip, held_back, rotate)

    def run(statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with binding.cursor(connection) as cursor:
            cursor.execute(statement, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            return rows

    def claim(part: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        chosen_of = {"ids": 0, "places": 1, "sizes": 2}
        return run(
            CLAIM_CHOSEN, {**args, **{k: [r[i] for r in part] for k, i in chosen_of.items()}}
        )

    def dead_letter(part: list[tuple[uuid.UUID, str]]) -> list[tuple[Any, ...]]:
        ((id_, error),) = part
        why = (
            f"the database refused to claim it ({error}); dead-lettered at its claim so that "
            "it cannot stop the others' delivery: retry it once the rule is mended"
        )
        return run(DEAD_REFUSED, {**args, "id": id_, "error": why})

    with transaction.atomic(using=using):
        with binding.cursor(connection) as cursor:
            bound_transaction(cursor, claim_settings())
            ids = pending_ids(cursor)
        if ids is None:
            return claimed([]), []
        args.update(ids)
        rows, refused_rows = halves(using, claim, run(CHOOSE[bool(skip), bool(held_back)], args))
        passed_over = []
        for (id_, _place, _size), error in refused_rows:
            dead, still = halves(using, dead_letter, [(id_, error)])
            rows += dead
            if still:
                passed_over.append((id_, error))
    return claimed(rows), passed_over
