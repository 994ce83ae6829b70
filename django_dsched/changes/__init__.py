"""The write side: how a schedule is specified, validated, created, changed and audited.

Every door (the Python API, the admin, REST, declarations, the importers, the commands)
goes through these names; nothing else writes ``schedule_t``.

- :mod:`.specs`: ``Once``, ``Interval``, ``Cron``, what to create, and building unsaved rows.
- :mod:`.constraints`: Python twins of ``schedule_t``'s CHECK constraints, memoised field
  validation, and the database's constraint errors mapped back to field errors.
- :mod:`.creates`: validating and creating one schedule with its "created" event;
  idempotency keys. Its statements: :mod:`.single_insert` (one row) and
  :mod:`.bulk_insert` (many, pipelined), bound by :mod:`django_dsched.runtime.binding`.
- :mod:`.bulk`: ``bulk_create`` and ``bulk_cancel``, all or nothing with per-item errors.
- :mod:`.edits`: every edit after a create: what it does to the next run, whether the
  editor may, the save (``save_schedule``).
- :mod:`.pauses`: pause and resume (compare-and-set).
- :mod:`.pause_ends`: the pauses that end by themselves (the leader's resumes; a row that
  cannot be resumed is set aside, the others resume).
- :mod:`.cancels`: cancel one schedule, a queryset or many ids, in one locking statement.
- :mod:`.on_demand`: fires on demand: run now, backfill, and the slots of a range.
- :mod:`.audit`: the audit event each change writes. :mod:`.describe`: timing in words.
- :mod:`.permissions`: who may do what, one rule per capability, asked by every door.
- :mod:`.quotas`: the quota of live schedules per host, checked by every create.
- :mod:`.unchanged`: why a pause, resume, cancel, run now or backfill did nothing, in the
  words every door says it (the schedule's state, where its slots are).
"""

from __future__ import annotations

from django_dsched.changes.bulk import bulk_cancel, bulk_create
from django_dsched.changes.cancels import cancel
from django_dsched.changes.creates import create, create_instance
from django_dsched.changes.edits import save_schedule
from django_dsched.changes.on_demand import backfill, slots_between, trigger
from django_dsched.changes.pauses import pause, resume
from django_dsched.changes.specs import Cron, Interval, Once

__all__ = [
    "Cron",
    "Interval",
    "Once",
    "backfill",
    "bulk_cancel",
    "bulk_create",
    "cancel",
    "create",
    "create_instance",
    "pause",
    "resume",
    "save_schedule",
    "slots_between",
    "trigger",
]
