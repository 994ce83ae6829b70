"""The suite's flush after each transactional test: TRUNCATE only the tables not as a
TRUNCATE left them, and post_migrate only when it has something to write.

Django's flush (pytest-django's ``transactional_db``) truncates every table of the project
in one statement, then sends post_migrate, whose receivers write the content types and
permissions back. With a partition per day of the event store and the outbox, each of some
45 tables and 190 indexes gets new files, however few of them the test wrote, and the
content types and permissions are written again after every test: two thirds of a flush's
time.

This one truncates, in one statement (with CASCADE, the tables that refer to them), the
tables and leaf partitions that hold a page or whose statistics were taken (an ANALYZE or
VACUUM of an empty table); the others are as a TRUNCATE leaves them. The content types and
permissions are kept when the flush sends post_migrate and they are what post_migrate wrote
after this process's previous flush (the same names, codenames and labels: :data:`WRITTEN`),
and post_migrate is then not sent: each of its receivers would write nothing (the content
types' and the permissions' find them all; the declared schedules' sync has no declarations
in the tests' settings, and is sent when a test's settings declare some). What it leaves is
what Django's leaves: every table empty, with no pages and no statistics, so a test of a
query plan starts as it did, and the content types and permissions as post_migrate writes
them (kept, they keep their ids).
"""

from __future__ import annotations

from typing import Any

# What the content types and permissions hold, by name (post_migrate gives them new ids
# each time it writes them): one md5 of both, ordered, each row a JSON array.
WRITTEN_SQL = """
SELECT md5(jsonb_build_array(
    (SELECT jsonb_agg(jsonb_build_array(app_label, model) ORDER BY app_label, model)
     FROM django_content_type),
    (SELECT jsonb_agg(jsonb_build_array(t.app_label, t.model, p.codename, p.name)
                      ORDER BY t.app_label, t.model, p.codename)
     FROM auth_permission p JOIN django_content_type t ON t.id = p.content_type_id)
)::text)
"""
# The tables post_migrate writes, kept by a flush that finds them as it wrote them.
WRITTEN_TABLES = ("django_content_type", "auth_permission")
# By database name: WRITTEN_SQL's answer after this process's latest post_migrate of a flush.
WRITTEN: dict[str, str] = {}
# Whether the flush under way keeps WRITTEN_TABLES (and sends no post_migrate): decided once
# a flush, as it starts (handle_flush).
KEEPS = [False]

# The leaf tables (partitions, and the tables that have none) of the flushed tables that a
# TRUNCATE would change, truncated together; nothing when none. ``{tables}``: the flushed
# tables' names as an ARRAY of string literals; a name that names no table fails the flush,
# as Django's does. ``{kept}``: the same, of the tables left as they are (KEEPS).
TRUNCATE_CHANGED = """
DO $flush$
DECLARE
    changed text;
BEGIN
    WITH flushed AS (
        SELECT quote_ident(name)::regclass AS id FROM unnest({tables}::text[]) AS t(name)
        WHERE name <> ALL({kept}::text[])
    ),
    leaves AS (
        SELECT id FROM flushed  -- a table with no partitions has no partition tree
        UNION
        SELECT p.relid FROM flushed CROSS JOIN LATERAL pg_partition_tree(flushed.id) AS p
        WHERE p.isleaf
    )
    SELECT string_agg(c.oid::regclass::text, ', ')
    INTO changed
    FROM leaves JOIN pg_class c ON c.oid = leaves.id
    WHERE c.relkind = 'r' AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0);
    IF changed IS NOT NULL THEN
        EXECUTE 'TRUNCATE ' || changed || ' CASCADE';
    END IF;
END
$flush$
"""


def literal(text: str) -> str:
    """A string literal (standard_conforming_strings, PostgreSQL's default since 9.1)."""
    return "'" + text.replace("'", "''") + "'"


def array(names: list[str]) -> str:
    return "ARRAY[" + ", ".join(literal(name) for name in names) + "]::text[]"


def written(connection: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute(WRITTEN_SQL)
        return str(cursor.fetchone()[0])


def keeps(connection: Any, sends_post_migrate: bool) -> bool:
    """Whether a flush of ``connection`` keeps WRITTEN_TABLES: it sends post_migrate (one
    that does not, for a serialized_rollback or available_apps, empties them, as Django's
    does) and they are as this process's latest post_migrate of a flush wrote them."""
    if not sends_post_migrate or connection.vendor != "postgresql":
        return False
    expected = WRITTEN.get(connection.settings_dict["NAME"])
    return expected is not None and written(connection) == expected


def install() -> None:
    """Flush this way from now on (PostgreSQL's backend; sequences kept, as pytest-django
    asks; a flush resetting sequences is Django's own)."""
    from django.core.management.commands import flush
    from django.db import connections
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if not tables or reset_sequences:
            return original(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        kept = list(WRITTEN_TABLES) if KEEPS[0] else []
        return [TRUNCATE_CHANGED.replace("{tables}", array(tables)).replace("{kept}", array(kept))]

    emit = flush.emit_post_migrate_signal

    def emit_post_migrate_signal(verbosity: int, interactive: bool, db: str, **kwargs: Any) -> None:
        from django_dsched.conf import app_settings
        from django_dsched.declared import declarations

        if KEEPS[0] and not (app_settings.SYNC_ON_MIGRATE and declarations()):
            return
        emit(verbosity, interactive, db, **kwargs)
        connection = connections[db]
        if connection.vendor == "postgresql":
            WRITTEN[connection.settings_dict["NAME"]] = written(connection)

    handle = flush.Command.handle

    def handle_flush(self: Any, **options: Any) -> Any:
        connection = connections[options["database"]]
        KEEPS[0] = keeps(connection, not options.get("inhibit_post_migrate"))
        try:
            return handle(self, **options)
        finally:
            KEEPS[0] = False

    setattr(DatabaseOperations, "sql_flush", sql_flush)  # noqa: B010  (a method replaced)
    setattr(flush, "emit_post_migrate_signal", emit_post_migrate_signal)  # noqa: B010
    setattr(flush.Command, "handle", handle_flush)  # noqa: B010
