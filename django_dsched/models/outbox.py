from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, models
from django.db.models.functions import Greatest
from django.utils.translation import gettext_lazy as _

from django_dsched.enums import DeliveryStatus, max_length_of
from django_dsched.models import envelope
from django_dsched.models.conditions import OneOf
from django_dsched.models.records import EventRecord
from django_dsched.models.times import OUTBOX_TIMES, in_range


class OutboxMessage(EventRecord):
    """A fired event waiting to be delivered; its id is the event's id.

    The fire statement inserts the row (PENDING); from then on only the relay
    (:mod:`django_dsched.outbox.relay`) and the dead-letter actions
    (:mod:`django_dsched.outbox.dead_letters`) write it. The delivery columns have database
    defaults because the fire statement does not name them.

    The payload and metadata are stored once, in the event (``event_store_t``, same id): a
    message has no columns for them, and every reader takes the event's
    (:attr:`delivered_payload`, the relay's claim). Retention never deletes an event while
    its message exists.
    """

    topic = models.CharField(_("topic"), max_length=126)
    status = models.CharField(
        _("status"),
        max_length=max_length_of(DeliveryStatus),
        choices=DeliveryStatus.choices,
        default=DeliveryStatus.PENDING,
    )
    priority = models.SmallIntegerField(
        _("priority"),
        db_default=0,
        help_text=_("Higher values are delivered first; equal values oldest first."),
    )
    attempts = models.IntegerField(
        _("attempts"),
        db_default=0,
        help_text=_("Delivery attempts started (each claim by a relay counts one)."),
    )
    next_attempt_ts = models.DateTimeField(
        _("next attempt"),
        null=True,
        blank=True,
        help_text=_("Not claimable before this time (set after a failed attempt)."),
    )
    last_error = models.TextField(_("last error"), blank=True, db_default="")
    delivered_ts = models.DateTimeField(_("delivered"), null=True, blank=True)
    claimed_by = models.CharField(
        _("claimed by"),
        max_length=255,
        blank=True,
        db_default="",
        help_text=_("The relay delivering the message now; empty when nobody is."),
    )
    claimed_until = models.DateTimeField(
        _("claimed until"),
        null=True,
        blank=True,
        help_text=_("Visibility timeout: after this another relay may claim the message."),
    )

    # Phases of the latest attempt (database clock; ``outbox.phases`` derives the run status from
    # them). Nullable without defaults: the fire statement does not write them.
    picked_ts = models.DateTimeField(
        _("picked"),
        null=True,
        blank=True,
        help_text=_("When a relay claimed the message for its latest attempt."),
    )
    started_ts = models.DateTimeField(
        _("started"),
        null=True,
        blank=True,
        help_text=_("When the latest attempt's run started (relay, or reported by a worker)."),
    )
    completed_ts = models.DateTimeField(
        _("completed"),
        null=True,
        blank=True,
        help_text=_("When the run completed successfully."),
    )
    failed_ts = models.DateTimeField(
        _("failed"),
        null=True,
        blank=True,
        help_text=_("When the latest attempt failed (its error is the last error)."),
    )

    class Meta:
        db_table = "outbox_message_t"
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        # Newest first by id: ids are time-ordered (a fire's carries its slot's millisecond,
        # history/event_ids.py), so the primary key serves the order and no index on the
        # time is written by every fire, claim and settle.
        ordering = ["-id"]
        permissions = [
            ("retry_outboxmessage", _("Can retry dead-lettered outbox messages")),
            ("discard_outboxmessage", _("Can discard dead-lettered outbox messages")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=OneOf("status", DeliveryStatus.values),
                name="dsched_outbox_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__gte=0), name="dsched_outbox_attempts_nonnegative"
            ),
            models.CheckConstraint(
                condition=~models.Q(status=DeliveryStatus.DELIVERED)
                | models.Q(delivered_ts__isnull=False),
                name="dsched_outbox_delivered_has_time",
            ),
            # Every time a message holds is one Python can read (models/times.py).
            models.CheckConstraint(
                condition=in_range(*OUTBOX_TIMES),
                name="dsched_outbox_times_in_range",
            ),
        ]
        indexes = [
            # A schedule's recent deliveries (admin, api.status), newest first.
            models.Index(
                "aggregate_id",
                models.F("aggregate_version").desc(),
                name="dsched_outbox_schedule_idx",
            ),
            # Serves the relays' claim (outbox/claims.py): pending rows by priority, then by the
            # time they become claimable (fired, backoff over, claim expired), so the rows
            # claimable now are a range at the front of each priority and rows that wait are
            # never read. The claim's SQL spells the expression exactly like this.
            models.Index(
                models.F("priority").desc(),
                Greatest("event_ts", "next_attempt_ts", "claimed_until"),
                condition=models.Q(status=DeliveryStatus.PENDING),
                name="dsched_outbox_ready_idx",
            ),
            # Serves the relays' backlog, host by host (outbox/claims.py): a skip scan of the
            # hosts with pending rows at a priority, then each host's rows claimable now as a
            # range, so one tenant's backlog is never read past to reach another's.
            models.Index(
                models.F("priority").desc(),
                "host_id",
                Greatest("event_ts", "next_attempt_ts", "claimed_until"),
                condition=models.Q(status=DeliveryStatus.PENDING),
                name="dsched_outbox_host_ready_idx",
            ),
            # Serves retention: delivered rows by delivery time.
            models.Index(
                fields=["delivered_ts"],
                condition=models.Q(status=DeliveryStatus.DELIVERED),
                name="dsched_outbox_delivered_idx",
            ),
            # Dead letters are few and looked at by operators; keep them cheap to list.
            models.Index(
                fields=["topic", "id"],
                condition=models.Q(status=DeliveryStatus.DELIVERY_FAILED),
                name="dsched_outbox_dead_idx",
            ),
            # The schedules list counts each schedule's dead letters (few: a partial index that
            # fires and deliveries never write to).
            models.Index(
                fields=["aggregate_id"],
                condition=models.Q(status=DeliveryStatus.DELIVERY_FAILED),
                name="dsched_outbox_dead_sched_idx",
            ),
            # The admin's dead letters, newest first (not a walk through all messages).
            models.Index(
                fields=["id"],
                condition=models.Q(status=DeliveryStatus.DELIVERY_FAILED),
                name="dsched_outbox_dead_id_idx",
            ),
            # Runs going on (started, not finished), by schedule: what schedule health reads
            # for runs that overran their maximum (django_dsched.health). A run the relay
            # sends and settles never enters it (its start and end are written together);
            # the entries are the runs under way and those whose worker never reported.
            models.Index(
                fields=["aggregate_id", "started_ts"],
                condition=models.Q(
                    started_ts__isnull=False, completed_ts__isnull=True, failed_ts__isnull=True
                ),
                name="dsched_outbox_running_idx",
            ),
            # Pending messages in id (time) order (the admin's and REST's pending lists, the
            # oldest pending message): with a partition per day, a filtered walk of the
            # primary key would read every old day whole to find it holds none.
            models.Index(
                fields=["id"],
                condition=models.Q(status=DeliveryStatus.PENDING),
                name="dsched_outbox_pending_id_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic}: {self.event_type} ({self.status})"

    @property
    def delivered_payload(self) -> Any:
        """The payload the relay delivers: its event's CloudEvents envelope
        (:mod:`django_dsched.models.envelope`, one query); None only if that event was
        deleted (the relay dead-letters such a message at its claim)."""

        return envelope.of_event(self.pk, using=self._state.db or DEFAULT_DB_ALIAS)


# The range of the pending messages' ids (NULL, NULL: none), which the relay's claim names so
# that only the days between them are planned (outbox/claims.py), exact to the day: the highest
# id, and the lowest if it is on an earlier day than that one, else the first id of that day
# (which the claim widens the range to anyway: history/partitions.whole_days).
#
# Each is the first entry from one end of dsched_outbox_pending_id_idx, and a probe from an end
# walks every entry of a message that stopped being pending there until VACUUM removes it.
# Fires are delivered roughly in the order of their ids, so a day's delivered messages pile up
# at the low end: the lowest id, asked from that end, walked the day's deliveries so far with
# every claim (over 100 pages a claim behind 20,000 deliveries, growing with the day's
# deliveries until VACUUM: tests/outbox/test_claim_days.py). So the low end is asked only below
# the highest id's day, where nothing is delivered in a burst of today's fires. The high end,
# where new fires land, is where the pending messages are; it walks deliveries only when
# nothing newer is pending (a relay that has caught up, asking once a poll), and then once
# instead of from both ends. The low end is still walked while pending messages span days: a
# burst across midnight (UTC), a backlog of several days drained oldest first, a message with
# an id far from its time (written by hand, in the default partition) left pending.
#
# A function, so that its own queries are planned once per session rather than over every
# day with each claim. Made by the initial migration.
PENDING_IDS = "dsched_pending_ids"
PENDING_IDS_FUNCTION = f"""
CREATE FUNCTION {PENDING_IDS}(OUT low uuid, OUT high uuid) LANGUAGE plpgsql STABLE AS $$
DECLARE
    fired_ms bigint;
    day_start uuid;
BEGIN
    high := (SELECT o.id FROM outbox_message_t o
             WHERE o.status = '{DeliveryStatus.PENDING.value}' ORDER BY o.id DESC LIMIT 1);
    IF high IS NULL THEN
        RETURN;
    END IF;
    -- The first id of high's UTC day: the milliseconds in an id's top 48 bits, to the day.
    fired_ms := ('x' || left(replace(high::text, '-', ''), 12))::bit(48)::bigint;
    day_start := (lpad(to_hex(fired_ms - mod(fired_ms, 86400000)), 12, '0')
                  || repeat('0', 20))::uuid;
    low := COALESCE((SELECT o.id FROM outbox_message_t o
                     WHERE o.status = '{DeliveryStatus.PENDING.value}' AND o.id < day_start
                     ORDER BY o.id LIMIT 1),
                    day_start);
END
$$;
"""
DROP_PENDING_IDS_FUNCTION = f"DROP FUNCTION IF EXISTS {PENDING_IDS}();"
