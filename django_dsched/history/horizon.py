"""Since when the history is complete: the purges' horizon (``history_horizon_t``).

Exactly once rests on the database refusing a second event for a (schedule, slot)
(:mod:`.partitions`). A purge deletes events: once a slot's event is gone, nothing refuses
that slot again, and a backfill over it would fire it a second time. The retention setting
does not say what was deleted (``purge_history --days 1`` deletes more than 45 days keep; a
setting raised, or retention turned off, brings nothing back), so the history says it itself:
``complete_since`` is a time such that every event ever written for a slot at or after it is
still there.

* Every purge moves it first (:func:`advance`): to the purge's cutoff, never back, in a
  transaction of its own committed before the purge deletes anything, and the purge deletes
  only what is older than that cutoff (an event is written at or after its slot, so an event
  older than the cutoff is of a slot before it). A purge that fails half way has moved the
  horizon anyway: it may say less than the history holds, never more.
* A backfill refuses a range with a slot before it, at every door (``changes/on_demand.py``),
  and its fire statement (``firing/on_demand.FIRE_SLOTS``) reads it again ``FOR SHARE`` and
  fires nothing if a slot is before it: a purge moving it meanwhile waits for that statement
  to commit, and a backfill starting meanwhile waits for the purge's move and reads the new
  horizon. A resume that catches up goes on from no earlier than it (``changes/pauses.py``).

``None``: nothing was ever purged. The row is made by ``migrate``; a purge makes it again
if it is missing.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connections, transaction

from django_dsched.conf import app_settings
from django_dsched.models.horizon import ROW
from django_dsched.runtime.loops import bound_transaction

# The cutoff of a purge keeping ``%(seconds)s`` of history (database clock), and the horizon
# moved to it unless it is already later. Returns the cutoff.
ADVANCE = """
WITH cut AS MATERIALIZED (
    SELECT statement_timestamp() - make_interval(secs => %(seconds)s) AS ts
)
INSERT INTO history_horizon_t (id, complete_since, advanced_ts)
SELECT %(row)s, ts, statement_timestamp() FROM cut
ON CONFLICT (id) DO UPDATE
SET complete_since = GREATEST(history_horizon_t.complete_since, EXCLUDED.complete_since),
    advanced_ts = EXCLUDED.advanced_ts
RETURNING (SELECT ts FROM cut)
"""

# The horizon.
READ = "SELECT complete_since FROM history_horizon_t WHERE id = %s"

# The horizon in a statement that fires slots: locked FOR SHARE, so that no purge moves it
# (and deletes before it) until that statement's transaction ends (firing/on_demand.py).
LOCKED = f"SELECT complete_since FROM history_horizon_t WHERE id = {ROW} FOR SHARE"


def advance(days_kept: float, using: str | None = None) -> datetime:
    """Move the horizon to the cutoff of a purge keeping ``days_kept`` days (database
    clock), in a transaction of its own; return that cutoff, the one the purge deletes by."""
    alias = using or app_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        bound_transaction(cursor)  # frozen here, it holds the horizon half a lease at most
        cursor.execute(ADVANCE, {"seconds": float(days_kept) * 86400, "row": ROW})
        (cutoff,) = cursor.fetchone()
    assert isinstance(cutoff, datetime)
    return cutoff


def complete_since(using: str | None = None) -> datetime | None:
    """The horizon: every fire of a slot at or after it is still recorded (None: nothing
    was ever purged)."""
    with connections[using or app_settings.DATABASE].cursor() as cursor:
        cursor.execute(READ, [ROW])
        row = cursor.fetchone()
    return None if row is None else row[0]
