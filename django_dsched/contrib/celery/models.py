from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class TaskRun(models.Model):
    """A Celery task id that ran (committed) under :class:`ExactlyOnceTask`: never again."""

    task_id = models.CharField(_("task id"), primary_key=True, max_length=255)
    task_name = models.CharField(_("task name"), max_length=255)
    started_ts = models.DateTimeField(_("started"), db_default=Now())

    class Meta:
        db_table = "dsched_celery_task_run_t"
        verbose_name = _("task run")
        verbose_name_plural = _("task runs")
        indexes = [models.Index(fields=["started_ts"], name="dsched_celery_run_started_idx")]

    def __str__(self) -> str:
        return f"{self.task_name} {self.task_id}"
