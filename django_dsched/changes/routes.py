"""Refusing a schedule whose topic no route grants to its host, at every door.

The relay would dead-letter each of its messages (:class:`~django_dsched.outbox.transports.
registry.NotGranted`): a create (the Python API with ``host_id``, REST, bulk, the admin,
declared schedules, the importers) and an edit that changes the topic are refused instead,
with the relay's own words, on ``event_topic``. Settings only, answered from memory per
(host, topic): no query. The operator's host with no route at all is not refused (the relay
retries it, and ``dsched.W003`` warns), as before.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from django_dsched.exceptions import ValidationError
from django_dsched.models import Schedule
from django_dsched.outbox.transports.registry import router


def check_routed(schedule: Schedule) -> None:
    """Raise :class:`ValidationError` on ``event_topic`` if no route serves the schedule's
    topic for its host."""
    why = router().refusal(schedule.event_topic, schedule.host_id)
    if why is not None:
        raise ValidationError(
            {"event_topic": [_("This topic is not delivered: %(why)s.") % {"why": why}]},
            code="not_routed",
        )
