"""Cursors for the bulk statements: parameters bound on the server, results in binary.

Django's psycopg 3 cursors bind on the client (unless ``OPTIONS["server_side_binding"]``):
each parameter is quoted into the statement's text. For an array of 5,000 ids, names or
JSON texts that means quoting every element in Python and the server parsing a long text
literal back, element by element. :func:`cursor` gives a cursor on Django's connection that
sends the parameters separately (the extended protocol) and, for placeholders written
``%(name)b``, in PostgreSQL's binary format, and reads its results in binary.

It is still Django's cursor wrapper (``execute_wrapper``, the query log and
``CaptureQueriesContext`` see its statements; errors are Django's), on Django's connection
and transaction. Every statement is sent unnamed (``prepare=False``): no named prepared
statement, which PgBouncer's transaction pooling could not carry (docs/pgbouncer.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, tzinfo
from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from psycopg import abc, adapt
from psycopg.abc import AdaptContext, Buffer
from psycopg.postgres import types
from psycopg.pq import Format

TIMESTAMPTZ_OID = types["timestamptz"].oid
# psycopg's own loader (in C): an aware datetime in the session's time zone.
_found = psycopg.adapters.get_loader(TIMESTAMPTZ_OID, Format.BINARY)
assert _found is not None
_BINARY: type[abc.Loader] = _found


class _UnpreparedCursor(psycopg.Cursor[Any]):
    """Server-side binding, results in binary, never a named prepared statement."""

    def execute(self, query: Any, params: Any = None, **_options: Any) -> _UnpreparedCursor:
        super().execute(query, params, prepare=False, binary=True)
        return self


class _TimestamptzLoader(adapt.Loader):
    """A binary ``timestamptz`` as Django reads one (in ``timezone``; naive when None),
    each distinct value converted once per result: the rows of a bulk statement share their
    timestamps (one ``statement_timestamp()``)."""

    format = Format.BINARY
    timezone: tzinfo | None = None

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._load = _BINARY(oid, context).load
        self._seen: dict[bytes, datetime] = {}

    def load(self, data: Buffer) -> datetime:
        key = bytes(data)
        value = self._seen.get(key)
        if value is None:
            value = self._seen[key] = self._load(data).replace(tzinfo=self.timezone)
        return value


_loaders: dict[Any, type[_TimestamptzLoader]] = {}


def wrapped(
    connection: BaseDatabaseWrapper,
    make: Callable[[psycopg.Connection[Any]], psycopg.Cursor[Any]],
    debug_wrapper: type[CursorDebugWrapper] = CursorDebugWrapper,
) -> CursorWrapper:
    """The psycopg cursor ``make`` builds on ``connection``'s own psycopg connection, made
    and wrapped as ``connection.cursor()`` makes and wraps Django's (the health check, the
    connection, the thread check; the query log with DEBUG), so use it in ``with``."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = make(connection.connection)
    connection.validate_thread_sharing()
    # What make_debug_cursor() / make_cursor() build (their stubs want Django's wrapper).
    wrapper = debug_wrapper if connection.queries_logged else CursorWrapper
    return wrapper(raw, connection)


def cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor (Django's wrapper, so use it in ``with``) binding on the server."""
    zone = connection.timezone
    loader = _loaders.get(zone)
    if loader is None:
        loader = _loaders[zone] = type(
            "TimestamptzLoader", (_TimestamptzLoader,), {"timezone": zone}
        )

    def make(raw_connection: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        raw = _UnpreparedCursor(raw_connection)
        raw.adapters.register_loader(TIMESTAMPTZ_OID, loader)
        return raw

    return wrapped(connection, make)
