"""The claim: which due schedules a batch takes, oldest first, on-time work before the backlog,
the backlog host by host.

``SELECT ... FOR UPDATE SKIP LOCKED``: the database's clock (``statement_timestamp()``)
decides what is due, and is returned with the rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from django_dsched.conf import app_settings
from django_dsched.models.overlap import ALLOW_ALL, FREE, PREVIOUS_RUN_OF, RUN_GOING
from django_dsched.models.times import readable
from django_dsched.timetables import backlog_window

# A time the claim cannot turn into microseconds Python can compute with: outside the years
# 1 to 9999 (models/times.py), +/-infinity included. Never a microsecond of such a year, so
# a path that missed it would still fail on this row alone (planning sets it aside).
UNREADABLE = -(2**63)


def microseconds(column: str) -> str:
    """SQL: a timestamptz column as microseconds since the epoch (NULL when NULL), and
    :data:`UNREADABLE` for a time outside the years 1 to 9999, so that no value PostgreSQL
    accepts can make the claim fail (the year 294270's microseconds overflow a bigint):
    planning sets such a row aside."""
    return (
        f"CASE WHEN {readable(column)} THEN (extract(epoch FROM {column}) * 1000000)::bigint"
        f" WHEN {column} IS NOT NULL THEN {UNREADABLE} END"
    )


# The overlap policies (models/overlap.py). An ALLOW_ALL row (the default) reads nothing more:
# NULL, decided without a call. Any other gets its policy, the run its slot is held for (or
# NULL), and its previous run, the newest message (one probe per day of the index on
# (aggregate_id, aggregate_version DESC), in a function: PROBES): its id and whether it is
# going ("queued": going and never attempted, which CANCEL_OTHER may cancel).
OVERLAP = f"""CASE WHEN overlap_policy = '{ALLOW_ALL}' THEN NULL
       ELSE ARRAY[overlap_policy, held_by::text] || COALESCE(
           {PREVIOUS_RUN_OF}(schedule_t.schedule_id, %(worker_timeout)s::float8),
           ARRAY[NULL, '{FREE}']::text[]) END"""
# Times travel as microseconds since the epoch: parsing and formatting thousands of
# timestamps per batch costs more than the batch's SQL. Nothing here can fail on a row's
# values: every column comes back as stored, to be judged by plan(), row by row. Then: the
# recurrence rule, the calendars (NULL for a plain schedule), their policy, for a
# calendar-filtered row the time of its last fire or change (firing/calendared.py), and
# the overlap policy's state (OVERLAP).
CLAIM_COLUMNS = f"""schedule_id::text, schedule_kind, frequency_unit, frequency_time,
       {microseconds("start_ts")},
       {microseconds("next_slot_ts")},
       (extract(epoch FROM statement_timestamp()) * 1000000)::bigint,
       cron_expression, time_zone, misfire_policy, misfire_grace_seconds, catch_up_limit,
       {microseconds("end_ts")}, max_fires, fire_count, jitter_seconds,
       rrule, calendar_ids::text[], calendar_policy,
       CASE WHEN calendar_ids IS NOT NULL
            THEN {microseconds("GREATEST(last_fired_ts, updated_ts)")} END,
       {OVERLAP}"""

# The position of calendar_ids in a claimed row (firing/calendared.py).
CALENDARS = 17

# A row whose slot is held for a run still going is passed over (it stays due, unlocked) and
# looked at again by every claim: one primary-key probe of that run per held row (in a
# function: PROBES). A row holding nothing (every ALLOW_ALL row) is decided without a call.
NOT_HELD = f"""CASE WHEN held_by IS NULL THEN true
                ELSE NOT COALESCE({RUN_GOING}(schedule_t.held_by, %(worker_timeout)s::float8),
                                  false) END"""

# With buckets (DSCHED_BUCKETS > 1) the claim takes only rows of the buckets this instance
# holds (no filter when it holds them all) and returns each row's bucket key, so the write
# fences exactly the buckets it touches.
IN_BUCKETS = "(bucket_key & %(mask)s) = ANY(%(buckets)s::int[])"
# Rows this instance could neither fire nor set aside (the database refused both) wait in
# its quarantine (the loop's): the claim passes over them for a while.
NOT_QUARANTINED = "schedule_id <> ALL(%(skip)s::uuid[])"
# Hosts over their fire rate (firing/throttle.py) whose bucket cannot pay a tick's fires:
# the claim passes over their rows, which stay due. With any rate set, the claim also returns
# each row's host, for its token.
NOT_HELD_BACK = "host_id <> ALL(%(held_back)s::uuid[])"
# A second before the last claim that found rows (the caller's, in microseconds): a row
# that came due just before that claim but committed after it (a create, an edit, a pause
# that ended) is still on time. The first claim of a process takes one backlog window
# before now.
SINCE = """COALESCE('epoch'::timestamptz + %(since)s::bigint * interval '1 microsecond'
                  - interval '1 second',
                  statement_timestamp() - make_interval(secs => %(window)s))"""


# Most hosts (tenants) one claim's fair share of the backlog visits; past that many the walk
# goes on at the next claim (it starts after a host drawn at random each claim).
FAIR_HOSTS = 256

# The backlog, host by host: the hosts with active schedules, walked by a skip scan of
# dsched_schedule_host_due_idx (one probe a host, only when a backlog waits) from after
# %(host_after)s round to it, at most FAIR_HOSTS of them; those with a row due before
# ``since`` (one probe each) each take an equal share of what the on-time rows leave of the
# batch (``fair``), oldest first. So one tenant's backlog of a million rows does not hold up
# another's: each claim takes rows of every host that is behind. What is left of the batch
# (a host had fewer than its share) goes to ``backlog``, oldest first, as before. One host's
# rows are asked as ``host_id >= h AND host_id <= h``, ordered by host then time: with
# ``host_id = h`` the planner may walk the due index (by time alone) filtering on the host,
# and read through another tenant's whole backlog to find its rows.
FAIR = """
hosts(host_id, n, wrapped) AS (
    SELECT COALESCE(a.h, f.h), 1, a.h IS NULL
    FROM (SELECT (SELECT host_id FROM schedule_t WHERE active AND host_id > %(host_after)s
                  ORDER BY host_id LIMIT 1) AS h) a,
         (SELECT (SELECT host_id FROM schedule_t WHERE active
                  ORDER BY host_id LIMIT 1) AS h) f
    WHERE (SELECT yes FROM waiting)
    UNION ALL
    SELECT x.h, h.n + 1, h.wrapped OR x.wraps
    FROM hosts h
    CROSS JOIN LATERAL (
        SELECT COALESCE(nx.h, CASE WHEN NOT h.wrapped THEN
                   (SELECT host_id FROM schedule_t WHERE active ORDER BY host_id LIMIT 1) END)
                   AS h,
               nx.h IS NULL AS wraps
        FROM (SELECT (SELECT s.host_id FROM schedule_t s WHERE s.active
                        AND s.host_id > h.host_id ORDER BY s.host_id LIMIT 1) AS h) nx
    ) x
    WHERE h.host_id IS NOT NULL AND h.n < %(fair_hosts)s
      AND NOT (h.wrapped AND h.host_id >= %(host_after)s)
),
behind AS MATERIALIZED (
    SELECT h.host_id, h.n, count(*) OVER () AS hosts
    FROM hosts h
    WHERE h.host_id IS NOT NULL AND NOT (h.wrapped AND h.host_id > %(host_after)s)
      AND (SELECT next_run_ts FROM schedule_t
           WHERE {where} AND host_id >= h.host_id AND host_id <= h.host_id
             AND next_run_ts <= (SELECT ts FROM since)
           ORDER BY host_id, next_run_ts LIMIT 1) IS NOT NULL
),
fair AS MATERIALIZED (
    SELECT c.* FROM (SELECT * FROM behind ORDER BY n) b
    CROSS JOIN LATERAL (
        SELECT {columns} FROM schedule_t
        WHERE {where} AND host_id >= b.host_id AND host_id <= b.host_id
          AND next_run_ts <= (SELECT ts FROM since) AND schedule_id <> ALL(%(again)s::uuid[])
        ORDER BY host_id, next_run_ts, priority DESC
        LIMIT (greatest(0, %(limit)s - (SELECT count(*) FROM fresh)
                        - (SELECT count(*) FROM again)) + b.hosts - 1) / b.hosts
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fresh) - (SELECT count(*) FROM again))
),"""


def claim_statement(
    *, buckets: bool = False, every_bucket: bool = False, skip: bool = False, hosts: bool = False
) -> str:
    """The claim: on-time work first, then the backlog, never more than ``%(limit)s`` rows.

    ``fresh`` takes the rows that came due since the previous claim (``SINCE``), oldest
    first, up to the whole batch, or the batch less ``%(backlog_share)s`` when anything else
    waits (``waiting``: one probe): whatever is on time is claimed in the next round,
    however large the backlog. ``again`` then takes the rows the previous batch fired that
    were due again at once (a catch-up, a slot due within the backlog window:
    ``%(again)s``, primary-key probes), and ``backlog`` the rows due before ``SINCE``,
    oldest first, each up to what is left of the batch: so a backlog drains even while
    on-time work would fill the batch. The parts take disjoint rows (by ``SINCE`` and by
    id), so no row is claimed twice; all skip rows locked by others. A claim shorter than
    the batch therefore left no due row that was free (what NEXT_DUE relies on), but those
    of held-back hosts, and but a share left for a backlog locked by others. ``fresh`` and
    ``backlog`` walk the due index. Before ``backlog``, ``fair`` (:data:`FAIR`) takes an
    equal share of what is left for each host behind, walking the host due index.
    ``hosts`` (a fire rate is set somewhere): each row's host comes back (before the bucket
    key), and the rows of held-back hosts are passed over."""
    columns = (
        CLAIM_COLUMNS + (", host_id::text" if hosts else "") + (", bucket_key" if buckets else "")
    )
    where = f"active AND {NOT_HELD}"
    if buckets and not every_bucket:
        where += f" AND {IN_BUCKETS}"
    if skip:
        where += f" AND {NOT_QUARANTINED}"
    if hosts:
        where += f" AND {NOT_HELD_BACK}"
    fair = FAIR.format(where=where, columns=columns)
    return f"""
WITH RECURSIVE since AS MATERIALIZED (SELECT {SINCE} AS ts),
-- Whether anything waits besides the on-time rows (one probe of the due index): only then
-- does the on-time part leave the backlog its share. The oldest row's time, not EXISTS: the
-- planner cannot know `since`, guesses a third of the rows qualify, and would answer an
-- EXISTS (which drops ORDER BY and LIMIT) by reading the table until a row does: all of
-- it when none does. ORDER BY ... LIMIT 1 is the head of the due index's range.
waiting AS MATERIALIZED (
    SELECT cardinality(%(again)s::uuid[]) > 0
           OR (SELECT next_run_ts FROM schedule_t
               WHERE {where} AND next_run_ts <= (SELECT ts FROM since)
               ORDER BY next_run_ts LIMIT 1) IS NOT NULL AS yes
),
fresh AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE {where} AND next_run_ts <= statement_timestamp()
      AND next_run_ts > (SELECT ts FROM since)
    ORDER BY next_run_ts, priority DESC
    LIMIT greatest(0, %(limit)s
                      - CASE WHEN (SELECT yes FROM waiting) THEN %(backlog_share)s ELSE 0 END)
    FOR UPDATE SKIP LOCKED
),
again AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE schedule_id = ANY(%(again)s::uuid[]) AND {where}
      AND next_run_ts <= (SELECT ts FROM since)
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fresh))
    FOR UPDATE SKIP LOCKED
),{fair}
backlog AS MATERIALIZED (
    SELECT {columns} FROM schedule_t
    WHERE {where} AND next_run_ts <= (SELECT ts FROM since)
      AND schedule_id <> ALL(%(again)s::uuid[])
      AND schedule_id <> ALL(ARRAY(SELECT schedule_id::uuid FROM fair))
    ORDER BY next_run_ts, priority DESC
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM fresh) - (SELECT count(*) FROM again)
                      - (SELECT count(*) FROM fair))
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM fresh UNION ALL SELECT * FROM again UNION ALL SELECT * FROM fair
UNION ALL SELECT * FROM backlog
"""


# (buckets, every bucket, skip, hosts) -> the claim; built once here, picked per batch.
CLAIMS = {
    (buckets, every, skip, hosts): claim_statement(
        buckets=buckets, every_bucket=every, skip=skip, hosts=hosts
    )
    for buckets in (False, True)
    for every in (False, True)
    for skip in (False, True)
    for hosts in (False, True)
    if buckets or not every
}
CLAIM = CLAIMS[False, False, False, False]  # no buckets, nothing quarantined, no rates
# The least part of a batch the backlog gets while on-time work would fill it.
BACKLOG_SHARE = 0.1


def claim_args(
    limit: int,
    since_us: int | None = None,
    skip: Collection[str] = (),
    again: Collection[str] = (),
    held_back: Collection[str] = (),
    host_after: uuid.UUID | None = None,
) -> dict[str, Any]:
    """The parameters of a claim of ``limit`` rows (see :func:`claim_statement`);
    ``host_after``: where the backlog's walk of the hosts starts (random: each claim starts
    elsewhere, so past :data:`FAIR_HOSTS` hosts every one gets its turn)."""
    return {
        "host_after": host_after if host_after is not None else uuid.uuid4(),
        "fair_hosts": FAIR_HOSTS,
        "held_back": list(held_back),
        "limit": limit,
        "since": since_us,
        "again": list(again),
        "window": backlog_window().total_seconds(),
        "backlog_share": max(1, int(limit * BACKLOG_SHARE)),
        "skip": list(skip),
        "worker_timeout": app_settings.OVERLAP_WORKER_TIMEOUT,
    }
