"""With ``--database``: what the primary's standbys promise across a failover (dsched.W030
to W032; docs/high-availability.md)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register
from django.db import DatabaseError, connections

from django_dsched.conf import app_settings

# The primary's standbys by mode, as this session sees them (sync_state is NULL in every row
# for a role without pg_read_all_stats), and whether this session's commits wait for a
# synchronous standby at all.
REPLICATION = """
SELECT pg_is_in_recovery(), count(*),
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
       count(*) FILTER (WHERE sync_state IS NULL),
       current_setting('synchronous_commit')
FROM pg_stat_replication
"""


def replication_messages(
    in_recovery: bool, standbys: int, synchronous: int, unknown: int, synchronous_commit: str
) -> list[CheckMessage]:
    """What the standbys of the database promise across a failover (docs/high-availability.md)."""
    guide = "See docs/high-availability.md."
    if in_recovery or standbys == 0:
        return []  # a standby reports nothing; a lone server has no failover to warn about
    if unknown == standbys:
        return [
            Warning(
                f"The primary has {standbys} standby(s), and this role cannot see whether they "
                "replicate synchronously (pg_stat_replication shows sync_state only to roles "
                "with pg_read_all_stats).",
                hint="GRANT pg_read_all_stats to the role that runs the check. " + guide,
                id="dsched.W032",
            )
        ]
    if synchronous == 0:
        return [
            Warning(
                f"The primary has {standbys} asynchronous standby(s) and no synchronous one: "
                "a failover to one of them loses what the primary committed and had not sent "
                "yet. Fires are then at least once, not exactly once: a lost slot fires again "
                "on the new primary with the same event id (consumers dedupe on it), or, "
                "under COALESCE, counts as missed when a later slot is due as well.",
                hint="For exactly once across a failover make the standby synchronous "
                "(Patroni: synchronous_mode: true; else synchronous_standby_names). " + guide,
                id="dsched.W030",
            )
        ]
    if synchronous_commit in ("local", "off"):
        return [
            Warning(
                f"synchronous_commit is {synchronous_commit!r} for this database role: "
                "commits do not wait for the synchronous standby, so a failover can lose "
                "acknowledged fires as with an asynchronous one.",
                hint="Use synchronous_commit = on (the default), remote_write or "
                "remote_apply for the scheduler's role. " + guide,
                id="dsched.W031",
            )
        ]
    return []


@register(Tags.database)
def check_replication(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``--database``: warn when a failover could lose fires (asynchronous standbys
    only, or commits that do not wait for the synchronous one)."""
    alias = app_settings.DATABASE
    if not databases or alias not in databases:
        return []
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(REPLICATION)
            row = cursor.fetchone()
    except DatabaseError:
        return []  # unreachable: other checks say so
    return replication_messages(*row)
