"""Whether the package's tables are in the database: a process started before
``manage.py migrate`` ran (or pointed at another database) says so in one line and waits,
instead of failing every round with a traceback."""

from __future__ import annotations

from typing import Any

import psycopg

from django_dsched.exceptions import MissingTables


def missing_tables_message(alias: str, detail: str = "") -> str:
    because = f" ({detail})" if detail else ""
    database = "" if alias == "default" else f" --database {alias}"
    return (
        f"django-dsched's tables are not in the database {alias!r}{because}: "
        f"run manage.py migrate{database}"
    )


def is_missing_table(exc: BaseException) -> bool:
    """Whether ``exc`` (Django's error, or psycopg's) is PostgreSQL's "relation does not
    exist"."""
    return isinstance(exc, psycopg.errors.UndefinedTable) or isinstance(
        exc.__cause__, psycopg.errors.UndefinedTable
    )


def require_tables(connection: Any) -> None:
    """Raise :class:`MissingTables` unless the package's tables are in ``connection``'s
    database (on its search path)."""
    from django_dsched.models import Event, Lease, OutboxMessage, Schedule

    names = [model._meta.db_table for model in (Schedule, Lease, Event, OutboxMessage)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NULL",
            [names],
        )
        missing = [name for (name,) in cursor.fetchall()]
    if missing:
        raise MissingTables(missing_tables_message(connection.alias, "no " + ", ".join(missing)))


__all__ = [
    "MissingTables",
    "is_missing_table",
    "missing_tables_message",
    "require_tables",
]
