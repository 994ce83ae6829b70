"""Whether the package's tables are in the database: a process started before
``manage.py migrate`` ran (or pointed at another database) says so in one line and waits,
instead of failing every round with a traceback."""

from __future__ import annotations

from typing import Any

import psycopg
from django.apps import apps
from django.db import DatabaseError

from django_dsched.exceptions import MissingTables


def is_missing_table(exc: BaseException) -> bool:
    """Whether ``exc`` (Django's error, or psycopg's) is PostgreSQL's "relation does not
    exist"."""
    return isinstance(exc, psycopg.errors.UndefinedTable) or isinstance(
        exc.__cause__, psycopg.errors.UndefinedTable
    )


def require_tables(connection: Any) -> None:
    """Raise :class:`MissingTables` unless the package's tables are in ``connection``'s
    database (on its search path)."""
    names = [
        apps.get_model("django_dsched", model)._meta.db_table
        for model in ("Schedule", "Lease", "Event", "OutboxMessage")
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NULL",
            [names],
        )
        missing = [name for (name,) in cursor.fetchall()]
    if missing:
        alias = connection.alias
        database = "" if alias == "default" else f" --database {alias}"
        raise MissingTables(
            f"django-dsched's tables are not in the database {alias!r} "
            f"(no {', '.join(missing)}): run manage.py migrate{database}"
        )


def ours_missing(exc: BaseException, connection: Any) -> MissingTables | None:
    """After ``exc``: the package's own tables missing (asked of the database), or None
    when ``exc`` is not "relation does not exist" or they are all there (another table is
    missing, say one a user's trigger writes to: that error is the error it is)."""
    if not is_missing_table(exc):
        return None
    try:
        require_tables(connection)
    except MissingTables as missing:
        return missing
    except DatabaseError:
        return None
    return None


__all__ = ["MissingTables", "is_missing_table", "ours_missing", "require_tables"]
