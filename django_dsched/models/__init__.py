"""The tables: schedules, their events and outbox messages, the leases, instances, quotas.

- :mod:`.schedule`, :mod:`.event`, :mod:`.outbox`, :mod:`.lease`, :mod:`.instance`,
  :mod:`.quota`, :mod:`.horizon`, :mod:`.calendar`, :mod:`.circuit`: the models, one a
  module; :mod:`.health`: a schedule's health thresholds and its runs' outcomes in a row;
  :mod:`.recurrence`: a schedule's recurrence rule and calendars.
- :mod:`.envelope`: the CloudEvents envelope of a fire, composed from its event's columns.
- :mod:`.records`: the columns events and outbox messages share.
- :mod:`.validators`, :mod:`.fields`, :mod:`.conditions`: what a value must be, in Python
  and as CHECK constraints; :mod:`.times`: the times a row may hold (one CHECK per table);
  :mod:`.ids`: time-ordered ids for new schedules; :mod:`.order`: the order people read
  schedules in; :mod:`.overlap`: the overlap and failure policies' columns, and when a run
  counts as going.
"""

from __future__ import annotations

from django_dsched.models.calendar import Calendar, CalendarWindow
from django_dsched.models.circuit import Circuit
from django_dsched.models.event import Event
from django_dsched.models.health import ScheduleHealth
from django_dsched.models.horizon import HistoryHorizon
from django_dsched.models.instance import SchedulerInstance
from django_dsched.models.lease import Lease
from django_dsched.models.outbox import OutboxMessage
from django_dsched.models.quota import TenantQuota
from django_dsched.models.schedule import Schedule

__all__ = [
    "Calendar",
    "CalendarWindow",
    "Circuit",
    "Event",
    "HistoryHorizon",
    "Lease",
    "OutboxMessage",
    "Schedule",
    "ScheduleHealth",
    "SchedulerInstance",
    "TenantQuota",
]
