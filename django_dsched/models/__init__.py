from __future__ import annotations

from django_dsched.models.event import Event
from django_dsched.models.instance import SchedulerInstance
from django_dsched.models.lease import Lease
from django_dsched.models.outbox import OutboxMessage
from django_dsched.models.quota import TenantQuota
from django_dsched.models.schedule import Schedule

__all__ = ["Event", "Lease", "OutboxMessage", "Schedule", "SchedulerInstance", "TenantQuota"]
