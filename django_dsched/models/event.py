from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_dsched.models.fields import ReadableJSONField
from django_dsched.models.records import EventRecord
from django_dsched.models.times import EVENT_TIMES, in_range


class Event(EventRecord):
    """One row per fire and per change of a schedule; never updated. A fire's payload is its
    data (the schedule's ``event_data`` when it fired) and its metadata holds its topic; its
    outbox message (same id) delivers the CloudEvents envelope composed from this row
    (:mod:`django_dsched.models.envelope`). A change's payload is the change."""

    payload = ReadableJSONField(_("payload"))
    metadata = ReadableJSONField(_("metadata"), default=dict)
    scheduled_ts = models.DateTimeField(
        _("scheduled for"), null=True, help_text=_("The grid slot this fire is for.")
    )
    leader_epoch = models.BigIntegerField(_("leader epoch"), null=True)

    class Meta:
        db_table = "event_store_t"
        verbose_name = _("event")
        verbose_name_plural = _("events")
        # Newest first by id: ids are time-ordered (a fire's carries its slot's millisecond, a
        # change's its time: history/event_ids.py), so the primary key serves the order.
        ordering = ["-id"]
        # Partitioned by id, one partition per UTC day (django_dsched/history): no unique
        # constraint without the id. The exactly-once rule is a unique (aggregate_id,
        # scheduled_ts) index in each partition with the CHECK dsched_event_slot_in_id (a
        # slot's events share a partition), written by django_dsched/history/partitions.py;
        # a schedule's versions are serialised by its row's lock (every writer bumps
        # schedule_t.aggregate_version in the statement that writes the event).
        indexes = [
            # A schedule's history, in version order (admin, REST).
            models.Index(
                fields=["aggregate_id", "aggregate_version"], name="dsched_event_version_idx"
            ),
        ]
        # Every time an event holds is one Python can read (models/times.py).
        constraints = [
            models.CheckConstraint(
                condition=in_range(*EVENT_TIMES),
                name="dsched_event_times_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} @ {self.event_ts:%Y-%m-%d %H:%M:%S}"
