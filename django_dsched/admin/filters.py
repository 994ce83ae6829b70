"""List filters whose choices cost a bounded query however big the history grows.

Django's ``AllValuesFieldListFilter`` lists a column's values with ``SELECT DISTINCT`` over
the whole table: over a million outbox messages that is a full scan on every page view.
These filters keep its URL parameters (``?event_topic=...``, ``?topic=...``) and its
behaviour, but read their choices from a bounded source, at most :data:`CHOICES_LIMIT` of
them: an index (a loose index scan), or at most :data:`SCAN_LIMIT` rows of ``schedule_t``.
A value that is not listed can still be filtered on (by URL, or found with search).
For a staff user limited to some tenants (:mod:`.tenancy`), the values are read from their
hosts' rows only: no other tenant's topic, event type or host is offered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import connections, models, router
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_dsched.admin import tenancy
from django_dsched.models import Schedule

# Values listed per filter; more would not be read anyway: search finds the rest.
CHOICES_LIMIT = 50
# Rows of schedule_t read for a filter's values (all of them in most projects).
SCAN_LIMIT = 10_000


def index_distinct(model: type[models.Model], column: str, limit: int) -> list[Any]:
    """Up to ``limit`` distinct values of ``column``, smallest first, by a loose index scan.

    One index probe per value (a recursive CTE jumping to the next larger value), so the
    cost follows the number of values returned, not the table's size. ``column`` must lead
    a b-tree index of ``model``'s table.
    """
    connection = connections[router.db_for_read(model)]
    table = connection.ops.quote_name(model._meta.db_table)
    name = connection.ops.quote_name(column)
    query = f"""
        WITH RECURSIVE v(value) AS (
            (SELECT {name} FROM {table} WHERE {name} IS NOT NULL ORDER BY {name} LIMIT 1)
            UNION ALL
            SELECT (SELECT {name} FROM {table} WHERE {name} > v.value ORDER BY {name} LIMIT 1)
            FROM v WHERE v.value IS NOT NULL
        )
        SELECT value FROM v WHERE value IS NOT NULL LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(query, [limit])
        return [row[0] for row in cursor.fetchall()]


def scanned_distinct(
    model: type[models.Model], column: str, limit: int, hosts: list[uuid.UUID] | None = None
) -> tuple[list[Any], bool]:
    """Up to ``limit`` distinct values of ``column`` among the first :data:`SCAN_LIMIT` rows
    (of ``hosts`` only, if given: through the index led by ``host_id``).

    Returns the values and whether every row was read (False: there may be more values).
    """
    connection = connections[router.db_for_read(model)]
    table = connection.ops.quote_name(model._meta.db_table)
    name = connection.ops.quote_name(column)
    where = "" if hosts is None else "WHERE host_id = ANY(%(hosts)s::uuid[])"
    query = f"""
        WITH scanned AS MATERIALIZED (SELECT {name} AS value FROM {table} {where}
                                      LIMIT %(scan)s)
        SELECT value, (SELECT count(*) FROM scanned) < %(scan)s
        FROM (SELECT DISTINCT value FROM scanned) AS found
        ORDER BY value
        LIMIT %(limit)s
    """
    with connection.cursor() as cursor:
        cursor.execute(query, {"scan": SCAN_LIMIT, "limit": limit, "hosts": hosts})
        rows = cursor.fetchall()
    return [value for value, _ in rows], all(complete for _, complete in rows)


def scanned_columns(
    model: type[models.Model], columns: list[str], limit: int, hosts: list[uuid.UUID] | None
) -> dict[str, tuple[list[Any], bool]]:
    """:func:`scanned_distinct` of several columns, from one read of the same rows."""
    connection = connections[router.db_for_read(model)]
    table = connection.ops.quote_name(model._meta.db_table)
    names = [connection.ops.quote_name(column) for column in columns]
    where = "" if hosts is None else "WHERE host_id = ANY(%(hosts)s::uuid[])"
    parts = " UNION ALL ".join(
        f"(SELECT {i} AS n, value FROM (SELECT DISTINCT {name} AS value FROM scanned) AS d{i}"
        f" ORDER BY value LIMIT %(limit)s)"
        for i, name in enumerate(names)
    )
    query = f"""
        WITH scanned AS MATERIALIZED (SELECT {", ".join(names)} FROM {table} {where}
                                      LIMIT %(scan)s)
        SELECT n, value, (SELECT count(*) FROM scanned) < %(scan)s FROM ({parts}) AS found
    """
    found: dict[str, tuple[list[Any], bool]] = {column: ([], True) for column in columns}
    with connection.cursor() as cursor:
        cursor.execute(query, {"scan": SCAN_LIMIT, "limit": limit, "hosts": hosts})
        for n, value, complete in cursor.fetchall():
            values, _ = found[columns[n]]
            found[columns[n]] = ([*values, value], complete)
    return found


class BoundedValuesFilter(admin.AllValuesFieldListFilter):
    """``AllValuesFieldListFilter`` with choices from :meth:`values` (bounded), not DISTINCT."""

    def __init__(
        self,
        field: models.Field[Any, Any],
        request: HttpRequest,
        params: dict[str, list[str]],
        model: type[models.Model],
        model_admin: admin.ModelAdmin[Any],
        field_path: str,
    ) -> None:
        # The parent only builds a lazy DISTINCT queryset; it is replaced before it runs.
        super().__init__(field, request, params, model, model_admin, field_path)
        self.request, self.model_admin = request, model_admin
        self.hosts = tenancy.hosts(request)  # None: every host
        self.complete = True  # values() says when it could not read every row
        values = [str(v) for v in self.values(CHOICES_LIMIT + 1) if v is not None]
        self.more = len(values) > CHOICES_LIMIT or not self.complete
        values = values[:CHOICES_LIMIT]
        # What is selected is always shown, listed or not.
        values += [v for v in self.lookup_val or [] if v not in values]
        self.lookup_choices = values  # type: ignore[assignment]  # a list is enough here

    def values(self, limit: int) -> list[Any]:
        raise NotImplementedError

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        yield from super().choices(changelist)
        if self.more:
            yield {
                "selected": False,
                "query_string": changelist.get_query_string(remove=[self.lookup_kwarg]),
                "display": _("… more: use the search box"),
            }


class ScheduleValuesFilter(BoundedValuesFilter):
    """A column of ``schedule_t``, the table of definitions (not of history). The list's
    filters of this kind read their values together, from one read of the rows (once per
    request)."""

    def values(self, limit: int) -> list[Any]:
        column = self.field.column
        assert column is not None  # a concrete field
        read: dict[str, tuple[list[Any], bool]] = getattr(self.request, "_dsched_values", {})
        if column not in read:
            columns = [column, *(c for c in self._siblings() if c != column)]
            read = scanned_columns(Schedule, columns, limit, self.hosts)
            self.request._dsched_values = read  # type: ignore[attr-defined]
        values, self.complete = read[column]
        return values

    def _siblings(self) -> list[str]:
        """The columns of the list's filters of this kind."""
        found = []
        for entry in self.model_admin.list_filter:
            if isinstance(entry, tuple) and entry[1] is type(self) and isinstance(entry[0], str):
                field = Schedule._meta.get_field(entry[0])
                if isinstance(field, models.Field) and field.column:
                    found.append(field.column)
        return found


class HostFilter(BoundedValuesFilter):
    """The tenants, read from the index on ``schedule_t (host_id, schedule_name)``; for a
    user limited to some, those."""

    def values(self, limit: int) -> list[Any]:
        if self.hosts is not None:
            return sorted(self.hosts)[:limit]
        return index_distinct(Schedule, "host_id", limit)


class OutboxTopicFilter(BoundedValuesFilter):
    """Outbox topics: the topics schedules fire to, not a DISTINCT over every message.

    A message's topic is its schedule's ``event_topic`` when it fired; a topic no schedule
    uses any more is not listed but can still be filtered on (``?topic=``) or searched.
    """

    def values(self, limit: int) -> list[Any]:
        values, self.complete = scanned_distinct(Schedule, "event_topic", limit, self.hosts)
        return values
