"""Recording what calendars did to a batch's slots: one audit event per calendar-filtered
row whose plan passed slots a calendar dropped or moved (``dsched.schedule.slots_filtered``,
on the schedule's version sequence), behind the batch's fence, in the batch's transaction.

Run only for a batch that has such rows: a batch of plain schedules runs nothing more.
"""

from __future__ import annotations

from django_dsched.firing.calendared import EVENT_TYPE, Fates
from django_dsched.firing.fence import FENCE, with_buckets
from django_dsched.firing.write import Writer
from django_dsched.history import event_ids

FATES = f"""
WITH {FENCE},
noted AS (
    UPDATE schedule_t s
    SET aggregate_version = s.aggregate_version + 1
    FROM unnest(%(ids)s::uuid[], %(payloads)s::jsonb[]) AS u(schedule_id, payload)
    WHERE s.schedule_id = u.schedule_id AND EXISTS (SELECT FROM fence)
    RETURNING s.schedule_id, s.host_id, s.schedule_name, s.origin, s.aggregate_version,
              s.bucket_key, u.payload
),
audit AS (
    INSERT INTO event_store_t (id, host_id, aggregate_id, aggregate_type, aggregate_version,
                               event_type, event_ts, payload, metadata, leader_epoch)
    SELECT {event_ids.change_sql("statement_timestamp()")}, host_id, schedule_id, 'Schedule',
           aggregate_version, '{EVENT_TYPE}', statement_timestamp(),
           jsonb_build_object('actor', 'scheduler', 'at', statement_timestamp()) || payload,
           jsonb_build_object(
               'actor', 'scheduler',
               'schedule_name', schedule_name,
               'origin', origin,
               'instance_id', %(instance)s::text,
               'leader_epoch', %(epoch)s::bigint),
           %(epoch)s
    FROM noted
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM noted)
"""
FATES_BUCKETS = with_buckets(FATES)


def record(writer: Writer, fates: Fates) -> bool:
    """Write the audit events of ``fates`` (rows the database refused to fire excepted);
    False: the fence failed. Narrowing, a refused statement records nothing (the fires
    stand)."""
    ids, payloads = fates.without({schedule_id for schedule_id, _error in writer.refused})
    if not ids:
        return True
    statement = FATES_BUCKETS if writer.bucketed else FATES
    result = writer.run(statement, {**writer.params, "ids": ids, "payloads": payloads})
    return result is None or bool(result[0])
