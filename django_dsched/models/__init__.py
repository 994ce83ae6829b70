from __future__ import annotations

from .event import Event
from .instance import SchedulerInstance
from .lease import SchedulerLock
from .outbox import OutboxMessage
from .schedule import Schedule

__all__ = ["Event", "OutboxMessage", "Schedule", "SchedulerInstance", "SchedulerLock"]
