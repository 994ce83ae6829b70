"""Per-row values sent to the fire path's statements: one array literal each."""

from __future__ import annotations

from typing import Any


def array_literal(values: list[Any]) -> str:
    """A PostgreSQL array literal of ids, enum names, integers, booleans or None.

    Sent as one text parameter and cast in SQL: binding thousands of array elements one by
    one costs more client time than the batch's SQL. Only values that need no quoting go
    here (UUIDs, upper-case names, numbers).
    """
    return "{" + ",".join(map(_array_element, values)) + "}"


def _array_element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)
