"""Whether a database error is the database refusing one row's data.

Such an error (a constraint or trigger refusing a value, a value out of range) is that row's
fault: the fire path sets the row aside and fires the rest, the relay records that outcome
as a failed attempt and the others as they were. Anything else (a lost connection, a lock
wait given up, a missing privilege, a full disk) is not a row's fault and goes to the loops'
reconnect path. :func:`refusal` says such an error in words, the same on both paths.
"""

from __future__ import annotations

from django.db import DatabaseError

# SQLSTATE classes of a refusal of one row's data: data exception, integrity constraint
# violation, program limit exceeded (a value too large for an index, say), and PL/pgSQL's
# RAISE (a user trigger).
REFUSAL_CLASSES = ("22", "23", "54", "P0")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (Django's, or the driver's it wraps)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    state = getattr(cause, "sqlstate", None)
    return state if isinstance(state, str) else None


# A row routed to a default partition while a day is attached to its parent: the attach's
# commit makes the waiting insert fail its partition constraint (23514 with no constraint
# name). Not the row's fault: the batch is tried again, and the row goes to its new day.
CHECK_VIOLATION = "23514"


def _partition_constraint(exc: BaseException) -> bool:
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    diag = getattr(cause, "diag", None)
    return getattr(diag, "constraint_name", "") is None and "partition constraint" in str(exc)


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a row's data (see ``REFUSAL_CLASSES``)."""
    state = sqlstate(exc)
    if state == CHECK_VIOLATION and _partition_constraint(exc):
        return False
    return isinstance(exc, DatabaseError) and state is not None and state[:2] in REFUSAL_CLASSES


def refusal(exc: BaseException, max_chars: int | None = None) -> str:
    """A database refusal in words: the error's class, SQLSTATE and primary message, at most
    ``max_chars`` characters (not its DETAIL, which repeats the row's values), e.g.
    ``CheckViolation (23514): new row for relation "schedule_t" violates check constraint "x"``.
    """
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    diag = getattr(cause, "diag", None)
    message = getattr(diag, "message_primary", None) or str(cause).split("\n", 1)[0]
    return f"{type(cause).__name__} ({sqlstate(exc)}): {message}".strip()[:max_chars]
