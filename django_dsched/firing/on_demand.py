"""Run now and backfills: given slots of one schedule fired outside the leader's loop; a
backfill fires nothing before the history's horizon (:mod:`django_dsched.history.horizon`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_dsched.cluster.lease import TIMELINE
from django_dsched.enums import DeliveryStatus
from django_dsched.firing.write import OUTBOX_OF_EVENTS
from django_dsched.history import event_ids
from django_dsched.models.horizon import ROW
from django_dsched.runtime.arrays import array_literal
from django_dsched.timetables.grid import to_microseconds

# Fires given slots of one schedule outside the leader's loop: "run now" and backfills.
# The schedule row is locked, so it serializes with the leader's fires; the database
# refuses a slot that already fired, and the insert skips it (ON CONFLICT DO NOTHING: the
# event's id, a function of the slot, or the exactly-once index finds it).
FIRE_SLOTS = f"""
WITH target AS MATERIALIZED (
    -- The state is checked under the row lock: a schedule cancelled a moment ago
    -- never fires, whatever its caller read before.
    SELECT * FROM schedule_t
    WHERE schedule_id = %(id)s AND state = ANY(%(states)s::text[])
    FOR UPDATE
),
slots AS (
    SELECT slot, 'epoch'::timestamptz + slot * interval '1 microsecond' AS slot_ts, ord
    FROM unnest(%(slots)s::bigint[]) WITH ORDINALITY AS u(slot, ord)
),
-- A backfill (%(guard)s) fires nothing if a slot is before the history's horizon: a purge
-- may have deleted its event, and nothing would refuse it again (history/horizon.py). The
-- horizon's row is read FOR SHARE: a purge moving it waits for this statement's commit, a
-- purge that moved it first is read as it left it.
horizon AS MATERIALIZED (
    SELECT complete_since FROM history_horizon_t WHERE id = {ROW} AND %(guard)s::boolean
    FOR SHARE
),
early AS MATERIALIZED (
    SELECT EXISTS (SELECT FROM slots s, horizon h WHERE s.slot_ts < h.complete_since) AS yes
),
fired AS MATERIALIZED (
    SELECT t.*, s.slot_ts, t.aggregate_version + s.ord AS version,
           {event_ids.sql("t.schedule_id", "s.slot")} AS event_id,
           statement_timestamp() AS fired_ts
    FROM target t CROSS JOIN slots s
    WHERE NOT (SELECT yes FROM early)
),
events AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, scheduled_ts)
    SELECT event_id, host_id, schedule_id, 'Schedule', version, event_type, fired_ts,
           event_data,
           jsonb_build_object(
               'topic', event_topic,
               'schedule_name', schedule_name,
               'priority', priority,
               'trigger', %(trigger)s::text,
               'actor', %(actor)s::text,
               'timeline', {TIMELINE}),
           slot_ts
    FROM fired
{OUTBOX_OF_EVENTS},
advanced AS (
    UPDATE schedule_t s
    SET aggregate_version = s.aggregate_version + (SELECT count(*) FROM slots),
        fire_count = s.fire_count + (SELECT count(*) FROM events),
        last_fired_ts = CASE WHEN EXISTS (SELECT FROM events) THEN statement_timestamp()
                             ELSE s.last_fired_ts END
    FROM target t
    WHERE s.schedule_id = t.schedule_id AND NOT (SELECT yes FROM early)
)
SELECT (SELECT count(*) FROM target), (SELECT count(*) FROM events),
       (SELECT pg_notify('dsched_outbox', '') FROM target), (SELECT yes FROM early)
"""


@dataclass(frozen=True, slots=True)
class OnDemand:
    """What :func:`fire_on_demand` did."""

    found: bool  # the schedule exists, in one of the states asked
    fired: int  # slots fired (those that had already fired are skipped)
    # A slot is before the history's horizon (a backfill): nothing fired.
    before_horizon: bool = False


def fire_on_demand(
    cursor: Any,
    schedule_id: Any,
    slots: list[datetime],
    *,
    states: list[str],
    trigger: str,
    actor: str,
    guard: bool = False,
) -> OnDemand:
    """Fire ``slots`` of one schedule now (in the caller's transaction): slots that had
    already fired are skipped by the database; nothing fires when the schedule does not
    exist or is not in one of ``states``, nor (``guard``: a backfill) when a slot is before
    the history's horizon."""
    cursor.execute(
        FIRE_SLOTS,
        {
            "id": schedule_id,
            "states": array_literal(states),
            "slots": [to_microseconds(slot) for slot in slots],
            "trigger": trigger,
            "actor": actor,
            "pending": DeliveryStatus.PENDING.value,
            "guard": guard,
        },
    )
    found, fired, _notified, early = cursor.fetchone()
    return OnDemand(bool(found), int(fired), bool(early))
