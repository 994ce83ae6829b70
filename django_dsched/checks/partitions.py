"""With ``--database``: partitions of the event store without the exactly-once index
(dsched.W040; docs/history-partitions.md)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register
from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.history.partitions import without_one_per_slot


@register(Tags.database)
def check_history_partitions(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: every partition of ``event_store_t`` has the exactly-once index,
    a unique ``(aggregate_id, scheduled_ts)`` index (dsched.W040; docs/history-partitions.md).
    A partition made by hand or by another tool may lack it, and then the database no longer
    refuses a second event for a (schedule, slot) in it."""
    alias = app_settings.DATABASE
    if not databases or alias not in databases or connections[alias].vendor != "postgresql":
        return []
    try:
        found = without_one_per_slot(alias)
    except DatabaseError:
        return []  # unreachable: other checks say so
    messages: list[CheckMessage] = []
    for part in found:
        make = f"create it: {part.create_sql()};"
        if part.suffix is None:
            hint = "It holds no single UTC day, so django-dsched does not make its index: " + make
        else:
            hint = (
                "The leader makes it within DSCHED_RETENTION_INTERVAL; to make it now, run "
                "`manage.py purge_history` (it logs an error if it cannot: two events of one "
                "slot in it); or " + make
            )
        # A warning, not an error: ``migrate`` runs the database checks and would refuse to
        # run, though the leader's next pass makes the index by itself.
        messages.append(
            Warning(
                f"The partition {part.name} of event_store_t has no unique index on "
                "(aggregate_id, scheduled_ts): the database does not refuse a second event "
                "for a (schedule, slot) in it.",
                hint=hint + " See docs/history-partitions.md.",
                id="dsched.W040",
            )
        )
    return messages
