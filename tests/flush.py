"""The suite's flush after each transactional test: TRUNCATE only what holds anything.

Django's flush (pytest-django's ``transactional_db``) truncates every table of the project in
one statement: with a partition per day of the event store and the outbox, that is about 150
relations given new files each time, about 0.2-0.4 s a test, most of them empty. This one
truncates, in one statement, the tables and leaf partitions that have any page at all (an
empty file: never written since its last TRUNCATE), and with CASCADE the tables that refer
to them. What it leaves is what Django's leaves: every table as a fresh TRUNCATE leaves it
(no rows, no pages, its statistics reset), so a test of a query plan starts as it did. Only
the content types and permissions are kept: Django's flush empties them and ``post_migrate``
writes the same rows back at once (it still runs, and adds any that are missing).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.operations import DatabaseOperations

# The leaf tables (partitions, and the tables that have none) of the flushed tables that
# hold a page, truncated together; nothing when none does.
TRUNCATE_WRITTEN = """
DO $flush$
DECLARE
    written text;
BEGIN
    WITH flushed AS (
        SELECT to_regclass(quote_ident(name)) AS id FROM unnest(%s::text[]) AS t(name)
    ),
    leaves AS (
        SELECT id FROM flushed  -- a table with no partitions has no partition tree
        UNION
        SELECT p.relid FROM flushed CROSS JOIN LATERAL pg_partition_tree(flushed.id) AS p
        WHERE p.isleaf
    )
    SELECT string_agg(c.oid::regclass::text, ', ')
    INTO written
    FROM leaves JOIN pg_class c ON c.oid = leaves.id
    WHERE c.relkind = 'r' AND pg_relation_size(c.oid) > 0;
    IF written IS NOT NULL THEN
        EXECUTE 'TRUNCATE ' || written || ' CASCADE';
    END IF;
END
$flush$
"""

# Written back as they were by post_migrate after every flush.
KEPT = frozenset({"django_content_type", "auth_permission"})

_original = DatabaseOperations.sql_flush


def sql_flush(
    self: DatabaseOperations,
    style: Any,
    tables: list[str],
    *,
    reset_sequences: bool = False,
    allow_cascade: bool = False,
) -> list[str]:
    if not tables or reset_sequences:
        return _original(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
    names = ",".join('"' + name.replace('"', '""') + '"' for name in tables if name not in KEPT)
    return [TRUNCATE_WRITTEN.replace("%s", "'{" + names.replace("'", "''") + "}'")]


def install() -> None:
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
