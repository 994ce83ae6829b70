"""What a frozen peer (tests/faults/peer.py ``call``) does, from the environment."""

from __future__ import annotations

import os

from django.db import transaction

from django_dsched import api
from django_dsched.models import Schedule


def create_for_the_host() -> str:
    """A create for the host in DSCHED_FAULT_HOST (a quota applies: the host's lock)."""
    schedule = api.create_interval(
        name="peer",
        every=1,
        unit="MINUTES",
        topic="reports",
        event_type="report.build",
        host_id=os.environ["DSCHED_FAULT_HOST"],
    )
    return str(schedule.pk)


def edit_in_a_transaction() -> str:
    """An edit of the schedule named "held" in a transaction of the caller's (as a view or
    an admin's form holds one): the row locked until it commits."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(schedule_name="held")
        schedule.priority = 1
        schedule.save(update_fields=["priority"])
    return str(schedule.pk)
