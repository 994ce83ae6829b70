from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class Lease(models.Model):
    """A bucket's lease: one row per bucket (``DSCHED_LEASE_ID`` for bucket 0, the only one
    with ``DSCHED_BUCKETS = 1``; ``DSCHED_LEASE_ID + bucket * 65536`` for the others).

    Written only by :mod:`django_dsched.cluster.lease`. ``epoch`` grows by one every time
    the lease changes hands; a fire commits only while its epoch is the row's epoch. The
    table and its key column keep the design's names (``scheduler_lock_t.lock_id``).
    """

    lease_id = models.IntegerField(_("lease id"), primary_key=True, db_column="lock_id")
    instance_id = models.CharField(_("leader instance"), max_length=255)
    last_heartbeat = models.DateTimeField(_("last heartbeat"))
    epoch = models.BigIntegerField(_("epoch"), default=1)
    acquired_ts = models.DateTimeField(_("acquired"), db_default=Now())
    holder_pid = models.IntegerField(
        _("leader backend pid"),
        default=0,
        help_text=_("The PostgreSQL backend the leader last renewed from."),
    )
    buckets = models.IntegerField(
        _("buckets"),
        default=1,
        db_default=1,
        help_text=_(
            "The cluster's bucket count (DSCHED_BUCKETS), kept on bucket 0's row: instances "
            "with another count refuse to start."
        ),
    )

    class Meta:
        db_table = "scheduler_lock_t"
        verbose_name = _("scheduler lease")
        verbose_name_plural = _("scheduler leases")

    def __str__(self) -> str:
        return f"{self.instance_id} (epoch {self.epoch})"
