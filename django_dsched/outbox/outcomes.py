"""Recording a batch's outcomes so that one the database refuses cannot lose the others.

A relay records the outcomes of a batch in one statement (:func:`.settling.settle`): one round
trip however large the batch. Error text comes from outside (an endpoint's reply, a
transport's or a handler's exception) and is made storable before it is sent, but a row can
still refuse its outcome for a reason of its own (a CHECK constraint or a trigger an operator
added, a value out of a column's range). The statement then fails as a whole; recording
nothing would leave every message of the batch claimed, to be sent again (another tenant's
too) at each claim until each is dead-lettered for want of an outcome.

So when the batch's statement fails with a refusal of a row's data (a data or integrity
error, a user trigger's RAISE: :mod:`django_dsched.runtime.refusals`), :func:`record` records
the outcomes one by one, each in its own savepoint of one transaction. An outcome the
database still refuses is recorded as a failed attempt in its place, whose error is a fixed
text naming the refusal (:func:`~django_dsched.runtime.refusals.refusal`: the error's class,
SQLSTATE and primary message, which names the constraint; never the refused values),
retried and dead-lettered like any failure. Only if that too is refused is the outcome left
unrecorded (the relay logs it): its claim expires, and the claim's own limit dead-letters
the message.

Nothing costs more when nothing is refused: the one statement, in autocommit, as before.
Connection errors (``OperationalError``, ``InterfaceError``) and other database errors are
not caught here: they reach the relay's reconnect path.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections, transaction

from django_dsched.models.validators import make_storable_text
from django_dsched.outbox.messages import Claimer, DeliveryOutcome, Message, Settled
from django_dsched.outbox.settling import settle
from django_dsched.runtime.refusals import refusal, refused

# Longest refusal quoted in the error of the failed attempt recorded in its place.
REFUSAL_MAX_CHARS = 300


@dataclass
class Recorded:
    """What :func:`record` wrote."""

    # What the settles returned: each outcome not recorded as delivered (a lost claim's with
    # status None), and each delivered one too when its time was asked for (settle's times).
    settled: list[Settled]
    # The outcomes as recorded: a refused outcome is replaced by its failed attempt.
    outcomes: list[DeliveryOutcome]
    # The outcomes replaced (id → the outcome the database refused).
    refused: dict[uuid.UUID, DeliveryOutcome] = field(default_factory=dict)
    # Outcomes refused even as a failed attempt: nothing was written for them.
    unrecorded: dict[uuid.UUID, DeliveryOutcome] = field(default_factory=dict)


def refused_attempt(outcome: DeliveryOutcome, exc: BaseException, delay: float) -> DeliveryOutcome:
    """The failed attempt recorded in place of an outcome the database refused."""
    sent = "sent and delivered" if outcome.delivered else "sent and failed"
    return DeliveryOutcome(
        outcome.message,
        error=(
            f"the outcome of this attempt ({sent}) could not be stored: the database refused "
            f"it ({make_storable_text(refusal(exc), REFUSAL_MAX_CHARS)}); recorded as a failed "
            "attempt instead"
        ),
        permanent=outcome.permanent,
        delay=outcome.delay or delay,  # a delivered outcome has none
        started=outcome.started,
        ended=outcome.ended,
    )


def record(
    using: str,
    cursor: Any,
    claimer: Claimer,
    outcomes: Sequence[DeliveryOutcome],
    retry_delay: Callable[[Message], float],
    *,
    times: bool = False,
) -> Recorded:
    """Record ``outcomes`` (through ``cursor``, on connection ``using``, in autocommit):
    in one statement, or, if the database refuses it, one by one.

    ``retry_delay(message)``: the wait before the next attempt of a message whose outcome
    is replaced by a failed attempt. ``times``: return the delivered ones too, with their
    times (:func:`.settling.settle`).
    """
    try:
        return Recorded(settle(cursor, claimer, outcomes, times=times), list(outcomes))
    except DatabaseError as exc:
        if not refused(exc) or connections[using].in_atomic_block:
            raise  # not a row's fault; or the caller's transaction is aborted
    # One by one, each in a savepoint of one transaction.
    recorded = Recorded([], [])
    with transaction.atomic(using=using):
        for outcome in outcomes:
            try:
                with transaction.atomic(using=using):
                    recorded.settled += settle(cursor, claimer, [outcome], times=times)
                recorded.outcomes.append(outcome)
                continue
            except DatabaseError as exc:
                if not refused(exc):
                    raise
                failed = refused_attempt(outcome, exc, retry_delay(outcome.message))
            try:
                with transaction.atomic(using=using):
                    recorded.settled += settle(cursor, claimer, [failed], times=times)
            except DatabaseError as exc:
                if not refused(exc):
                    raise
                recorded.unrecorded[outcome.message.id] = outcome
                continue
            recorded.outcomes.append(failed)
            recorded.refused[outcome.message.id] = outcome
    return recorded
