"""The statement of a single create (``api.create_*``, the admin's and REST's create): one
schedule and its "created" audit event, in one ``INSERT`` (a data-modifying CTE).

A single create is bound by its statement, which the server parses, analyses and plans on
every call. The statement names only the columns whose value differs from what the database
gives an unnamed column (its ``db_default``, or NULL for a nullable column without one): a
``create_once(delay=...)`` names 11 of 33, with 12 parameters instead of 36. The audit
event's definition takes the named columns from the inserted row, as before, and the others
as one ``jsonb`` constant of their database defaults written into the statement: the same
object, whatever the mix. Statements are built once per set of named columns (a handful in
practice) and cached.

A prepared statement sends the statement through a server-binding psycopg cursor with
``prepare=True`` on Django's own connection and wrapper (the query log, execute wrappers and
error translation stay), so the server parses and plans each variant once per session: it
halves the server's work per create (docs/performance.md). ``DSCHED_PREPARE_CREATES``: True,
always; False, never; None (the default), from a session's second create on, unless the
session goes through a pooler (:func:`.behind_pooler`, asked once per session at its second
create): PgBouncer < 1.22 in transaction mode cannot carry prepared statements
(docs/pgbouncer.md), and a session that makes one create (``CONN_MAX_AGE = 0``) gains
nothing from preparing it and pays for no check.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Self
from weakref import WeakKeyDictionary

import psycopg
from django.db import IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Field, Value
from django.db.models.expressions import DatabaseDefault

from django_dsched.changes import audit
from django_dsched.changes.constraints import constraint_error, event_data_json
from django_dsched.changes.specs import TIMED
from django_dsched.conf import app_settings
from django_dsched.models import Schedule
from django_dsched.runtime import binding
from django_dsched.runtime.connections import behind_pooler

# Definition fields read from the inserted row even when left to their default: the times
# are rendered by the database (its spelling of a timestamp), the data is the stored jsonb.
_FROM_ROW = frozenset(("start_ts", "end_ts", "event_data"))

_UNSET = object()


def _database_default(field: Field[Any, Any]) -> Any:
    """The value the database gives ``field``'s column when an insert does not name it, or
    ``_UNSET`` when it has none that Python knows (the column must then be named)."""
    if getattr(field, "generated", False):
        return _UNSET
    if field.has_db_default():
        default = field.db_default  # a value, or an expression (Now(): unknown here)
        if isinstance(default, Value):
            return default.value
        return _UNSET if hasattr(default, "resolve_expression") else default
    return None if field.null else _UNSET


class _Columns:
    """Per concrete column of ``schedule_t``: (field, attribute, column, database default,
    whether its value is sent as JSON text), once per process."""

    rows: list[tuple[Field[Any, Any], str, str, Any, bool]] = []

    @classmethod
    def get(cls) -> list[tuple[Field[Any, Any], str, str, Any, bool]]:
        if not cls.rows:
            cls.rows = [
                (
                    field,
                    field.attname,
                    str(field.column),
                    _database_default(field),
                    field.get_internal_type() == "JSONField",
                )
                for field in Schedule._meta.concrete_fields
                if not getattr(field, "generated", False)
            ]
        return cls.rows


def _is_default(value: Any, default: Any) -> bool:
    """Whether the database would store ``value`` as it stores ``default`` (same value and
    kind: 1 and True are equal but not the same column value)."""
    if default is _UNSET:
        return False
    if value is None or default is None:
        return value is default
    same_kind = type(value) is type(default) or (
        isinstance(value, str) and isinstance(default, str)
    )
    return same_kind and value == default


def _literal(text: str) -> str:
    """``text`` as an SQL string constant inside a statement with pyformat parameters."""
    return "'" + text.replace("'", "''").replace("%", "%%") + "'"


_statements: dict[tuple[Any, ...], str] = {}


def _statement(named: tuple[str, ...], timed: bool) -> str:
    key = (named, timed, app_settings.DATABASE)
    statement = _statements.get(key)
    if statement is None:
        statement = _statements[key] = _build(named, timed)
    return statement


def _build(named: tuple[str, ...], timed: bool) -> str:
    """The statement naming the columns ``named`` (parameters of the same names) and, if
    ``timed``, the :data:`TIMED` columns as ``statement_timestamp() + %(delay_)s``."""
    quote = connections[app_settings.DATABASE].ops.quote_name
    columns = [*named, *(TIMED if timed else ())]
    values = [f"%({column})s" for column in named]
    values += ["statement_timestamp() + %(delay_)s"] * (len(columns) - len(named))
    # Definition fields whose column is left to a known database default: a constant.
    constant = {
        attname: default
        for _field, attname, column, default, _json in _Columns.get()
        if attname in _DEFINITION
        and attname not in _FROM_ROW
        and column not in columns
        and default is not _UNSET
    }
    definition = audit.definition_sql(
        "c", [name for name in audit.DEFINITION_FIELDS if name not in constant]
    )
    if constant:
        definition = f"{_literal(json.dumps(constant, sort_keys=True))}::jsonb || {definition}"
    returned = ["start_ts"] if timed else []
    return f"""WITH c AS (
    INSERT INTO {quote(Schedule._meta.db_table)} ({", ".join(quote(c) for c in columns)})
    VALUES ({", ".join(values)})
    ON CONFLICT DO NOTHING
    RETURNING *
), audit AS (
{audit.created_sql(definition, "    ")}
)
SELECT {", ".join(f"c.{quote(column)}" for column in [*returned, *_READ_BACK])} FROM c"""


# What the database fills and the instance needs back (``updated_ts`` is ``created_ts``).
_READ_BACK = ("bucket_key", "created_ts")
_DEFINITION = frozenset(audit.DEFINITION_FIELDS)


def insert_one(
    schedule: Schedule, delay: timedelta | None, *, actor: Any, data_text: str | None = None
) -> bool:
    """Insert ``schedule`` (validated) and its "created" event in one statement; with
    ``delay``, its start is the statement's time plus ``delay`` (no jitter, no end: see
    ``Preparer._once_time``); ``data_text`` the event data's JSON text if known. Fills in
    what the database computed; False (nothing written) if a unique constraint refused the
    row (its name, or its idempotency key)."""
    values = schedule.__dict__
    params: dict[str, Any] = {}
    named: list[str] = []
    timed = delay is not None
    for field, attname, column, default, is_json in _Columns.get():
        value = values.get(attname)
        if value is default:  # the common case, decided without a call (None, 0, "UTC")
            continue
        if (timed and attname in TIMED) or _is_default(value, default):
            continue
        if isinstance(value, DatabaseDefault):
            if default is not _UNSET:  # what the database stores (the clock's are read back)
                values[attname] = default
            continue
        named.append(column)
        encoder = getattr(field, "encoder", None)
        if attname == "event_data":
            params[column] = event_data_json(value, data_text, encoder)
        elif is_json and value is not None:
            params[column] = json.dumps(value, cls=encoder)
        else:
            params[column] = value
    params["delay_"] = delay
    params["event_type_"] = audit.PREFIX + "created"
    params["actor_"] = audit.actor_name(actor)
    statement = _statement(tuple(named), timed)
    connection = connections[app_settings.DATABASE]
    try:
        with _cursor(connection) as cursor:
            cursor.execute(statement, params)
            row = cursor.fetchone()
    except IntegrityError as exc:
        raise constraint_error(exc, schedule) from exc
    if row is None:
        return False
    if delay is not None:
        start, bucket_key, created = row
        values["start_ts"] = values["next_run_ts"] = values["next_slot_ts"] = start
    else:
        bucket_key, created = row
    values["bucket_key"] = bucket_key
    values["created_ts"] = values["updated_ts"] = created
    state = values["_state"]
    state.adding = False
    state.db = connection.alias
    return True


# A use count no statement reaches: with it as the connection's threshold only a statement
# executed with prepare=True is prepared.
_ONLY_WHEN_ASKED = 2**62


class _PreparingCursor(psycopg.Cursor[Any]):
    """A server-binding cursor whose every statement is prepared (from its first use).

    Django opens its connections with ``prepare_threshold = None``, under which psycopg
    prepares nothing even when asked: the threshold is lifted while this cursor executes and
    restored after, so the connection's other statements keep Django's setting (with
    Django's default client-side binding they are never prepared in any case)."""

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        connection = self.connection
        threshold = connection.prepare_threshold
        if threshold is None:
            connection.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            return super().execute(query, params, prepare=True, binary=binary)
        finally:
            connection.prepare_threshold = threshold


class _PreparedDebugWrapper(CursorDebugWrapper):
    """Django's debug wrapper logging the statement with its values: its own reads them
    back from the psycopg cursor, which keeps no query text for a prepared execution (the
    log would hold None)."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(self.db.ops.compose_sql(sql, params), params):
            return CursorWrapper.execute(self, sql, params)


# Per psycopg session (DSCHED_PREPARE_CREATES = None): None after its first create, then
# whether it prepares (it is not behind a pooler).
_sessions: WeakKeyDictionary[Any, bool | None] = WeakKeyDictionary()


def _prepares(connection: BaseDatabaseWrapper) -> bool:
    setting = app_settings.PREPARE_CREATES
    if setting is not None:
        return bool(setting)
    connection.ensure_connection()
    session = connection.connection
    if session not in _sessions:
        _sessions[session] = None
        return False
    verdict = _sessions[session]
    if verdict is None:
        verdict = _sessions[session] = not behind_pooler(connection)
    return verdict


def _cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """Django's cursor, or one that prepares its statement (:func:`_prepares`), wrapped as
    Django wraps its own."""
    if not _prepares(connection):
        return connection.cursor()
    return binding.wrapped(connection, _PreparingCursor, _PreparedDebugWrapper)


__all__ = ["insert_one"]
