"""Runs' outcomes in a row per schedule (``schedule_health_t``), written by the statements
that record them: the relay's settle (:data:`.settling.SETTLE`) and the workers' reports
(:mod:`.phases`), as a part of that same statement (no round trip of its own).

A failure is an attempt that failed (to be retried or dead-lettered) or a run a worker
reported failed; a success is a run the relay completed (its send is the run) or a worker
reported completed. A hand-off (a delivery to a transport whose workers run the work) ends a
row of failed hand-offs but not a row of the workers' failures: only a worker's completion
does. Only the schedules that need it are written: one whose outcome here failed, one that
is failing, one marked ``monitored`` (its last success is exported); a success of any other
schedule writes nothing here (two probes of small hashed sets). Rows are written in
schedule id order, so two relays settling outcomes of the same schedules never deadlock,
and nothing here can refuse the statement it rides in (no constraint but the key, a count
that stops at the int4 maximum).
"""

from __future__ import annotations

# What a settled row (``m``: the message, ``o``: its outcome) tells of its run, in the
# settle's RETURNING.
OUTCOME = """m.aggregate_id AS schedule_id, m.aggregate_version AS version,
          o.error IS NOT NULL AS failed, o.started_ago IS NULL AS handed_off,
          CASE WHEN o.error IS NULL THEN COALESCE(m.completed_ts, m.delivered_ts)
               ELSE m.failed_ts END AS outcome_ts,
          o.error"""

# Whether the schedule ``{column}`` is failing or monitored: two hashed sets, each read once
# per statement from a small partial index.
KEPT_UP = """({column} IN (SELECT f.schedule_id FROM schedule_health_t f WHERE f.failures > 0)
           OR {column} IN (SELECT s.schedule_id FROM schedule_t s WHERE s.monitored))"""

# The stored row is reset (a success came): a completed run, or a hand-off when the row's
# last failure was not a worker's.
RESETS = (
    "(EXCLUDED.last_success_ts IS NOT NULL"
    " OR (EXCLUDED.handed_off_ts IS NOT NULL AND NOT h.worker_failure))"
)
KEPT = f"(CASE WHEN {RESETS} THEN 0 ELSE h.failures END)"
FAILURES = f"LEAST({KEPT}::bigint + EXCLUDED.failures, 2147483647)::int"

# ``ran``: one row per schedule: the failures after its last success in this statement
# (all of them when none), when the first of those happened, the last failure and its
# error, the last success and hand-off, whether its failures are a worker's.
UPSERT = f"""
health AS (
    INSERT INTO schedule_health_t AS h (schedule_id, failures, failing_since_ts,
        last_failure_ts, last_error, last_success_ts, handed_off_ts, worker_failure)
    SELECT schedule_id, failures, failing_since_ts, last_failure_ts, COALESCE(last_error, ''),
           last_success_ts, handed_off_ts, worker_failure
    FROM ran
    ORDER BY schedule_id
    ON CONFLICT (schedule_id) DO UPDATE SET
        failures = {FAILURES},
        failing_since_ts = CASE WHEN {FAILURES} = 0 THEN NULL
                                WHEN {KEPT} = 0 THEN EXCLUDED.failing_since_ts
                                ELSE h.failing_since_ts END,
        last_failure_ts = GREATEST(EXCLUDED.last_failure_ts, h.last_failure_ts),
        last_error = CASE WHEN EXCLUDED.last_failure_ts IS NOT NULL THEN EXCLUDED.last_error
                          ELSE h.last_error END,
        last_success_ts = GREATEST(EXCLUDED.last_success_ts, h.last_success_ts),
        handed_off_ts = GREATEST(EXCLUDED.handed_off_ts, h.handed_off_ts),
        worker_failure = CASE WHEN EXCLUDED.failures > 0 THEN EXCLUDED.worker_failure
                              WHEN {RESETS} THEN false ELSE h.worker_failure END
)"""


def after_settle(settled: str) -> str:
    """The CTEs that record the outcomes a settle's ``settled`` CTE returned (``schedule_id``,
    ``version``, ``failed``, ``handed_off``, ``outcome_ts``, ``error``) for the schedules
    that need it, ending with the write (a CTE named ``health``)."""
    kept_up = KEPT_UP.format(column="o.schedule_id")
    return f"""
outcomes AS (
    SELECT o.*, max(CASE WHEN NOT o.failed THEN o.version END)
                    OVER (PARTITION BY o.schedule_id) AS reset_version
    FROM {settled} o
    WHERE o.schedule_id IN (SELECT schedule_id FROM {settled} WHERE failed) OR {kept_up}
),
ran AS (
    SELECT schedule_id,
           count(*) FILTER (WHERE failed AND version > COALESCE(reset_version, -1))::int
               AS failures,
           min(outcome_ts) FILTER (WHERE failed AND version > COALESCE(reset_version, -1))
               AS failing_since_ts,
           max(outcome_ts) FILTER (WHERE failed) AS last_failure_ts,
           (array_agg(error ORDER BY version DESC) FILTER (WHERE failed))[1] AS last_error,
           max(outcome_ts) FILTER (WHERE NOT failed AND NOT handed_off) AS last_success_ts,
           max(outcome_ts) FILTER (WHERE NOT failed AND handed_off) AS handed_off_ts,
           false AS worker_failure
    FROM outcomes
    GROUP BY schedule_id
),{UPSERT}"""


def after_report(reported: str, *, failed: bool) -> str:
    """The CTEs that record a worker's report: ``reported`` returns the message's
    ``schedule_id``, ``outcome_ts`` and ``counts`` (whether this report is news: a failure
    not reported yet). Parameter ``%(error)s``: the failure's error."""
    needed = "true" if failed else KEPT_UP.format(column="r.schedule_id")
    return f"""
ran AS (
    SELECT r.schedule_id,
           {"1" if failed else "0"} AS failures,
           {"r.outcome_ts" if failed else "NULL::timestamptz"} AS failing_since_ts,
           {"r.outcome_ts" if failed else "NULL::timestamptz"} AS last_failure_ts,
           {"%(error)s::text" if failed else "NULL::text"} AS last_error,
           {"NULL::timestamptz" if failed else "r.outcome_ts"} AS last_success_ts,
           NULL::timestamptz AS handed_off_ts,
           {str(failed).lower()} AS worker_failure
    FROM {reported} r
    WHERE r.counts AND {needed}
),{UPSERT}"""
