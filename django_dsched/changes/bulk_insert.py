"""``bulk_create``'s statement: many new schedules and their "created" audit events in one
``INSERT`` per :data:`CHUNK` rows (``creates.insert`` of more than one item comes here).

The values that differ between rows (ids, names, event data, ...) go as one array each,
unnested; those the same in every row (the topic of 10,000 reminders) as one parameter.
The arrays are bound on the server, in PostgreSQL's binary format (:mod:`binding`): as
text literals, the client quoted and the server parsed every element of 5,000-element
arrays, a third of the statement's time. Each audit event's id has the row's
``created_ts`` in its top bits (``event_ids.change_sql``: the event is stored in that day's
partition) and is built from the row inserted, with no join back to the arrays.

Rows skipped by a unique conflict (``ON CONFLICT DO NOTHING``) are left unsaved: the
caller decides what they are (an existing key, a name in use).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import psycopg
from django.contrib.postgres.fields import ArrayField
from django.db import DatabaseError, IntegrityError, connections
from django.db.models import Field

from django_dsched.changes import audit
from django_dsched.changes.constraints import constraint_error, event_data_json
from django_dsched.changes.specs import TIMED, database_defaults
from django_dsched.conf import app_settings
from django_dsched.models import Schedule
from django_dsched.runtime import binding

# Rows per statement.
CHUNK = 2_500
# Per-row inputs that are not columns: a delay= (the time is the statement's plus it).
EXTRA = (("delay_", "interval"),)
# Array columns (a schedule's calendars): a per-row value goes as the array's text in a
# text[] (PostgreSQL's arrays of arrays are rectangular), cast back in the statement.
ARRAY_COLUMNS = frozenset(
    str(field.column) for field in Schedule._meta.concrete_fields if isinstance(field, ArrayField)
)

_column_lists: dict[tuple[str, ...], list[tuple[Field[Any, Any], str, str, bool]]] = {}
_statements: dict[tuple[Any, ...], str] = {}


def _columns(filled: tuple[str, ...]) -> list[tuple[Field[Any, Any], str, str, bool]]:
    """(field, attribute, column, sent as JSON text) of each column an insert names: all
    but ``filled`` (those the database fills)."""
    if filled not in _column_lists:
        _column_lists[filled] = [
            (field, field.attname, str(field.column), field.get_internal_type() == "JSONField")
            for field in Schedule._meta.concrete_fields
            if str(field.column) not in filled
        ]
    return _column_lists[filled]


def _statement(filled: tuple[str, ...], returned: tuple[str, ...], shared: frozenset[str]) -> str:
    key = (filled, returned, shared, app_settings.DATABASE)
    if key not in _statements:
        _statements[key] = _build_statement(filled, returned, shared)
    return _statements[key]


def _build_statement(
    filled: tuple[str, ...], returned: tuple[str, ...], shared: frozenset[str]
) -> str:
    """The INSERT of schedules and their "created" events. Parameters: ``aN`` the arrays
    (bound in binary), a column's name its value when ``shared``, ``event_type_`` and
    ``actor_``. Gives one row per schedule inserted: its id, then ``returned``."""
    connection = connections[app_settings.DATABASE]
    quote = connection.ops.quote_name
    columns = [(field, column) for field, _attname, column, _json in _columns(filled)]
    inputs_types = [(column, field.db_type(connection) or "") for field, column in columns]
    inputs_types += EXTRA
    arrays = [(name, db_type) for name, db_type in inputs_types if name not in shared]
    inputs = {name: f"%({name})s::{db_type}" for name, db_type in inputs_types if name in shared}
    inputs.update(
        {
            name: f"i.a{n}::{db_type}" if name in ARRAY_COLUMNS else f"i.a{n}"
            for n, (name, db_type) in enumerate(arrays)
        }
    )
    unnest = ", ".join(
        f"%(a{n})b::{'text' if name in ARRAY_COLUMNS else db_type}[]"
        for n, (name, db_type) in enumerate(arrays)
    )
    aliases = ", ".join(f"a{n}" for n in range(len(arrays)))
    values = ", ".join(
        f"coalesce({inputs[column]}, statement_timestamp() + {inputs['delay_']})"
        if field.attname in TIMED
        else inputs[column]
        for field, column in columns
    )
    names = ", ".join(quote(column) for _field, column in columns)
    # The definition recorded in each audit event. The fields that are one parameter for
    # the whole statement are built into jsonb once (an uncorrelated subquery: one InitPlan)
    # and joined to the fields that differ per row: the same object, at a fraction of the
    # per-row cost (jsonb keys have no order, so the two halves make the same value).
    timed = {column for field, column in columns if field.attname in TIMED}
    once = [name for name in audit.DEFINITION_FIELDS if name in shared and name not in timed]
    per_row = audit.definition_sql("c", [n for n in audit.DEFINITION_FIELDS if n not in once])
    if once:
        pairs = ", ".join(f"'{name}', {inputs[name]}" for name in once)
        definition = f"(SELECT jsonb_build_object({pairs})) || {per_row}"
    else:
        definition = per_row
    back = ", ".join(f"c.{quote(column)}" for column in ("schedule_id", *returned))
    return f"""
        WITH c AS (
            INSERT INTO {quote(Schedule._meta.db_table)} ({names})
            SELECT {values}
            FROM unnest({unnest}) WITH ORDINALITY AS i({aliases}, ord_) ORDER BY i.ord_
            ON CONFLICT DO NOTHING
            RETURNING *
        ), audit AS (
{audit.created_sql(definition, " " * 12)}
        )
        SELECT {back} FROM c
    """


def array_text(values: Sequence[Any]) -> str:
    """PostgreSQL's text of a one-dimensional array of ``values`` (ids: no quoting needed)."""
    return "{" + ",".join(map(str, values)) + "}"


def _same(values: list[Any]) -> bool:
    """Whether every value is the first one, of the same type (1, 1.0 and True are equal
    but not the same parameter). Both tests run in C (a column of 5,000 values)."""
    first = values[0]
    return values.count(first) == len(values) and len(set(map(type, values))) == 1


def _readers(returned: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(attribute, from_db_value or None) of each column read back."""
    by_column = {str(field.column): field for field in Schedule._meta.concrete_fields}
    return [
        (by_column[column].attname, getattr(by_column[column], "from_db_value", None))
        for column in returned
    ]


class Inserter:
    """Sends the statement of each chunk as soon as it is given (:meth:`send`) and reads
    every result in :meth:`finish`: a context manager holding psycopg's pipeline mode, so
    a statement goes out without waiting for the previous one's result, and the caller
    validates the next chunk while the server inserts this one (two cores, in parallel).

    A statement that fails (a constraint) is raised by :meth:`finish`; the statements after
    it are not run. Its error may reach the client while a later chunk is being sent: it
    is then kept, nothing more is sent, and :meth:`finish` raises it, so the caller still
    validates every item and reports the invalid ones first (as when validation came
    first). Leaving the block on an exception drops the results unread (the caller's
    savepoint undoes whatever was sent).
    """

    def __init__(self, *, actor: Any) -> None:
        self.connection = connections[app_settings.DATABASE]
        self.who = audit.actor_name(actor)
        self._sent: list[tuple[Any, Sequence[Any], tuple[str, ...]]] = []
        self._pipeline: Any = None
        self._failed: DatabaseError | None = None

    def __enter__(self) -> Inserter:
        self.connection.ensure_connection()
        # Pipeline mode needs libpq 14 or later (psycopg's binary package bundles one); with
        # an older libpq each statement runs as it is sent: the same result, no overlap.
        if psycopg.Pipeline.is_supported():
            with self.connection.wrap_database_errors:
                self._pipeline = self.connection.connection.pipeline()
                self._pipeline.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: Any, traceback: Any) -> None:
        pipeline, self._pipeline = self._pipeline, None
        try:
            if pipeline is not None:
                with self.connection.wrap_database_errors:
                    pipeline.__exit__(kind, exc, traceback)
        except DatabaseError:
            if kind is None:
                raise
            # Already leaving on an error (a validation error, say): the one raised is
            # that one; the savepoint is rolled back anyway.
        finally:
            for cursor, _chunk, _returned in self._sent:
                cursor.close()
            self._sent.clear()

    def send(self, chunk: Sequence[Any]) -> None:
        """Send the insert of ``chunk`` (``creates.Prepared``, at most :data:`CHUNK`)."""
        if self._failed is not None:
            return
        filled = tuple(database_defaults(chunk[0].schedule))
        # Read back: the time (of a delay=) and what the database filled in. ``updated_ts``
        # is ``created_ts`` (both now()); ``next_run_ts`` and ``next_slot_ts`` of a delay=
        # are its start (no jitter: see Preparer._once_time).
        returned = ("start_ts", *(c for c in filled if c != "updated_ts"))
        rows_values = [item.schedule.__dict__ for item in chunk]
        inputs: dict[str, list[Any]] = {}
        for field, attname, column, is_json in _columns(filled):
            encoder = getattr(field, "encoder", None)
            if attname == "event_data":
                # Event data validated by its one compact encoding is sent as that text.
                inputs[column] = [
                    event_data_json(values[attname], item.data_text, encoder)
                    for values, item in zip(rows_values, chunk, strict=True)
                ]
            elif is_json:
                inputs[column] = [
                    None if value is None else json.dumps(value, cls=encoder)
                    for value in map(itemgetter(attname), rows_values)
                ]
            else:
                inputs[column] = list(map(itemgetter(attname), rows_values))
        inputs["delay_"] = [item.delay for item in chunk]
        shared = frozenset(
            name for name, values in inputs.items() if name != "schedule_id" and _same(values)
        )
        for name in ARRAY_COLUMNS - shared:
            inputs[name] = [None if value is None else array_text(value) for value in inputs[name]]
        statement = _statement(filled, returned, shared)
        params: dict[str, Any] = {"event_type_": audit.PREFIX + "created", "actor_": self.who}
        params.update({name: inputs[name][0] for name in shared})
        arrays = [name for name in inputs if name not in shared]
        params.update({f"a{n}": inputs[name] for n, name in enumerate(arrays)})
        cursor = binding.cursor(self.connection)
        self._sent.append((cursor, chunk, returned))
        try:
            cursor.execute(statement, params)
        except DatabaseError as exc:  # an earlier chunk's error, read while sending this one
            self._failed = exc

    def finish(self) -> None:
        """Read each statement's rows: each inserted item gets the values the database
        computed; one skipped by a unique conflict gets ``created = False``."""
        connection, alias = self.connection, self.connection.alias
        if isinstance(self._failed, IntegrityError):
            raise constraint_error(self._failed) from self._failed
        if self._failed is not None:
            raise self._failed
        for cursor, chunk, returned in self._sent:
            try:
                rows = cursor.fetchall()
            except IntegrityError as exc:
                raise constraint_error(exc, chunk[0].schedule if len(chunk) == 1 else None) from exc
            readers = _readers(returned)
            attnames = [attname for attname, _converter in readers]
            converted = [(n, c) for n, (_a, c) in enumerate(readers) if c is not None]
            position = {item.schedule.schedule_id: n for n, item in enumerate(chunk)}
            inserted = set()
            for row in rows:
                index = position[row[0]]
                inserted.add(index)
                item = chunk[index]
                values = item.schedule.__dict__
                read = row[1:]
                if converted:
                    read = list(read)
                    for n, converter in converted:
                        read[n] = converter(read[n], None, connection)
                values.update(zip(attnames, read, strict=True))
                values["updated_ts"] = values["created_ts"]
                if item.delay is not None:
                    values["next_run_ts"] = values["next_slot_ts"] = values["start_ts"]
                state = values["_state"]
                state.adding = False
                state.db = alias
            if len(inserted) < len(chunk):
                for n, item in enumerate(chunk):
                    if n not in inserted:
                        item.created = False


def insert_many(items: Sequence[Any], *, actor: Any) -> None:
    """Insert ``items`` (``creates.Prepared``, at least one) with their "created" events,
    one statement per :data:`CHUNK` (see :class:`Inserter`)."""
    with Inserter(actor=actor) as inserter:
        for offset in range(0, len(items), CHUNK):
            inserter.send(items[offset : offset + CHUNK])
        inserter.finish()


__all__ = ["CHUNK", "Inserter", "insert_many"]
