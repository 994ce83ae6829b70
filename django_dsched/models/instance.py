from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class SchedulerInstance(models.Model):
    """A running ``run_scheduler`` (or relay) process, as it last reported itself.

    Written only by :mod:`django_dsched.cluster.presence`; the admin's cluster page reads it. Rows
    of processes that stopped gracefully are deleted; others age out of the page.
    """

    instance_id = models.CharField(_("instance"), max_length=255, primary_key=True)
    role = models.CharField(_("role"), max_length=16)
    hostname = models.CharField(_("host"), max_length=255)
    pid = models.IntegerField(_("process id"))
    epoch = models.BigIntegerField(_("leader epoch"), null=True)
    # Which cluster the instance belongs to: its DSCHED_LEASE_ID and DSCHED_BUCKETS (null for
    # a process that is not a scheduler). Bucket owners rank only the members of their own
    # cluster (cluster/lease.py, MEMBERS).
    lease_id = models.IntegerField(_("lease id"), null=True)
    buckets = models.IntegerField(_("buckets"), null=True)
    started_ts = models.DateTimeField(_("started"))
    last_seen_ts = models.DateTimeField(_("last seen"))

    class Meta:
        db_table = "scheduler_instance_t"
        verbose_name = _("scheduler instance")
        verbose_name_plural = _("scheduler instances")
        ordering = ["instance_id"]

    def __str__(self) -> str:
        return f"{self.instance_id} ({self.role})"
