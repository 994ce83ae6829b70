"""The suite's flush after each transactional test: TRUNCATE only the tables not as a
TRUNCATE left them.

Django's flush (pytest-django's ``transactional_db``) truncates every table of the project
in one statement: with a partition per day of the event store and the outbox, each of some
45 tables and 190 indexes gets new files, however few of them the test wrote. This one
truncates, in one statement (with CASCADE, the tables that refer to them), the tables and
leaf partitions that hold a page or whose statistics were taken (an ANALYZE or VACUUM of an
empty table); the others are as a TRUNCATE leaves them. What it leaves is what Django's
leaves: every table empty, with no pages and no statistics, so a test of a query plan
starts as it did.
"""

from __future__ import annotations

from typing import Any

# The leaf tables (partitions, and the tables that have none) of the flushed tables that a
# TRUNCATE would change, truncated together; nothing when none. ``{tables}``: the flushed
# tables' names as an ARRAY of string literals; a name that names no table fails the flush,
# as Django's does.
TRUNCATE_CHANGED = """
DO $flush$
DECLARE
    changed text;
BEGIN
    WITH flushed AS (
        SELECT quote_ident(name)::regclass AS id FROM unnest({tables}::text[]) AS t(name)
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


def install() -> None:
    """Flush this way from now on (PostgreSQL's backend; sequences kept, as pytest-django
    asks; a flush resetting sequences is Django's own)."""
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
        names = "ARRAY[" + ", ".join(literal(name) for name in tables) + "]"
        return [TRUNCATE_CHANGED.replace("{tables}", names)]

    setattr(DatabaseOperations, "sql_flush", sql_flush)  # noqa: B010  (a method replaced)
