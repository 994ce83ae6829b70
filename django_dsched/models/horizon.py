from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

# The key of the table's one row.
ROW = 1


class HistoryHorizon(models.Model):
    """Since when the history is complete: every event ever written for a slot at or after
    ``complete_since`` is still in ``event_store_t`` (None: nothing was ever purged).

    Exactly once rests on the database refusing a second event for a (schedule, slot); once
    a purge has deleted a slot's event, nothing would refuse it. So every purge (a day's
    drop, the default partition's deletes, ``purge_history``, the leader's retention) first
    moves this horizon forward to its cutoff, in a transaction of its own committed before
    it deletes anything, and never back; a backfill refuses slots before it, and the fire
    statement of a backfill skips them under this row's lock
    (:mod:`django_dsched.history.horizon`). One row (``ROW``), made by ``migrate``; a purge
    makes it again if it is missing.
    """

    id = models.SmallIntegerField(primary_key=True, default=ROW)
    complete_since = models.DateTimeField(
        _("history complete since"),
        null=True,
        help_text=_("Every fire of a slot at or after this time is still recorded."),
    )
    advanced_ts = models.DateTimeField(_("advanced"), db_default=Now())

    class Meta:
        db_table = "history_horizon_t"
        verbose_name = _("history horizon")
        verbose_name_plural = _("history horizon")
        default_permissions = ()

    def __str__(self) -> str:
        return f"history complete since {self.complete_since}"
