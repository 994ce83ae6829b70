"""Per-row values sent to bulk statements (the fire path's, the relay's settle): one array
literal each, sent as one text parameter and cast in SQL. Binding thousands of elements one
by one costs more client time than the batch's SQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any


def array_literal(values: Iterable[Any]) -> str:
    """A PostgreSQL array literal of ids, enum names, integers, booleans or None.

    Only values that need no quoting go here (UUIDs, upper-case names, numbers). A UUID is
    written as its 32 hex digits, which PostgreSQL reads as it reads the hyphenated form, at
    a third of ``str()``'s cost.
    """
    return "{" + ",".join([_array_element(value) for value in values]) + "}"


def _array_element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, uuid.UUID):
        return value.hex
    return str(value)


def repeated_array_literal(values: Iterable[float | None]) -> str:
    """:func:`array_literal` of numbers (or None) that repeat, each distinct one turned
    into text once: the send times of a batch, shared by each chunk's messages."""
    texts: dict[float | None, str] = {None: "NULL"}
    parts = []
    for value in values:
        text = texts.get(value)
        if text is None:
            text = texts[value] = str(value)
        parts.append(text)
    return "{" + ",".join(parts) + "}"
