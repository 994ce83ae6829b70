"""Finding the rows the database refuses, so that one row cannot fail a statement for all.

The loops write many rows in one statement (a claim, a renewal, a resume of the pauses that
ended, a retention delete): one round trip however many rows. A row can refuse such a write
for a reason of its own (a CHECK ... NOT VALID or a trigger an operator added, a value out of
a column's range), and the statement then fails for every row, and again at every try.

:func:`halves` writes such a batch again in halves, each under a savepoint of the caller's
transaction, until each part that fails is one row: the other rows are written, the refused
ones come back with the database's error, for the caller to set aside, dead-letter or pass
over. Errors that are no row's fault (a lost connection, a lock wait given up) are raised.
The fire path narrows its own batches the same way on its raw cursor (``firing/write.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, transaction

from django_dsched.runtime.refusals import refusal, refused

T = TypeVar("T")
R = TypeVar("R")

# Longest error text kept for a refused row, by default.
ERROR_MAX_CHARS = 2000


def halves(
    using: str,
    run: Callable[[list[T]], list[R]],
    items: list[T],
    *,
    fault: Callable[[BaseException], bool] | None = None,
    describe: Callable[[BaseException], str] | None = None,
) -> tuple[list[R], list[tuple[T, str]]]:
    """``run(part)`` over ``items`` in halves, each in a savepoint of the caller's
    transaction on ``using``, until each part that fails with one row's fault is one item:
    what the parts returned, and each refused item with its error.

    ``fault(exc)``: whether an error can be one row's (default: the database refusing a
    row's data, :func:`~.refusals.refused`); ``describe(exc)``: its words (default: the
    database's, :func:`~.refusals.refusal`)."""
    is_fault = fault or (lambda exc: isinstance(exc, DatabaseError) and refused(exc))
    words = describe or (lambda exc: refusal(exc, ERROR_MAX_CHARS))
    done: list[R] = []
    refused_items: list[tuple[T, str]] = []
    pending = [items]
    while pending:
        part = pending.pop()
        try:
            with transaction.atomic(using=using):
                done += run(part)
        except Exception as exc:
            if not is_fault(exc):
                raise
            if len(part) == 1:
                refused_items.append((part[0], words(exc)))
            else:
                half = len(part) // 2
                pending += [part[half:], part[:half]]  # the first half goes next
    return done, refused_items
