"""``ExactlyOnceTask``: a Celery base task that runs each task id once.

The Celery transport delivers at least once: a relay that dies after the broker confirmed a
task and before it recorded the delivery leaves the message to be sent again, with the same
task id (the outbox message id). With this base class the worker runs it once:

1. it opens a transaction on the dsched database (``DSCHED_DATABASE``, or the task's
   ``dedupe_database``) and inserts the task id into ``dsched_celery_task_run_t``
   (``ON CONFLICT DO NOTHING``);
2. if the row was already there (committed by an earlier run) the task is skipped and logged
   ("skipped ... already ran"); if another worker is running the same id right now, the insert
   waits for it to finish, then skips (or runs, if that run failed);
3. otherwise the task body runs inside that transaction; an exception (including
   ``self.retry()``) rolls the record back, so a retry or a redelivery runs it again.

So the task's database writes on that database and its record commit together: a task id's
effects there happen exactly once. Effects elsewhere (an e-mail, an HTTP call) happen once
unless the worker dies after them and before the commit. The task holds a database
connection in a transaction while it runs: keep such tasks short, or split them.

Each run reports its phases to the outbox message whose id is the task id
(:mod:`django_dsched.outbox.phases`): started before the transaction, completed after its
commit (also when skipped: the earlier run committed), failed with the error when it raised.

A task called directly (``build(42)``, no task id) just runs. ``purge_task_runs(days)``
deletes old records; run it now and then (a dsched schedule can do it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Task
from django.db import connections, transaction
from django.db.models import DurationField, Value
from django.db.models.functions import Now

from django_dsched.conf import app_settings
from django_dsched.contrib.celery.models import TaskRun
from django_dsched.outbox import phases
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)

CLAIM = """
INSERT INTO dsched_celery_task_run_t (task_id, task_name, started_ts)
VALUES (%s, %s, clock_timestamp())
ON CONFLICT (task_id) DO NOTHING
"""


class ExactlyOnceTask(Task):  # type: ignore[misc]  # Celery ships no type information
    """Run at most once per task id; the run and its record commit together."""

    # Database alias of the record (and of the task's transaction); None: DSCHED_DATABASE.
    dedupe_database: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        task_id = getattr(self.request, "id", None)
        if not task_id:
            return super().__call__(*args, **kwargs)
        alias = self.dedupe_database or app_settings.DATABASE
        # The run's phases go to its outbox message (outside the run's transaction, so a
        # failure is recorded although the run rolls back).
        phases.report_quietly(phases.report_started, task_id)
        try:
            with transaction.atomic(using=alias):
                with connections[alias].cursor() as cursor:
                    cursor.execute(CLAIM, [str(task_id), self.name[:255]])
                    first = cursor.rowcount == 1
                if first:
                    result = super().__call__(*args, **kwargs)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            phases.report_quietly(phases.report_failed, task_id, error)
            raise
        # A skipped id ran before and committed: that run completed.
        phases.report_quietly(phases.report_completed, task_id)
        if not first:
            logger.info("skipped task %s id=%s: it already ran", self.name, task_id)
            return None
        return result


def purge_task_runs(days: float | None = None, *, using: str | None = None) -> int:
    """Delete records of runs started more than ``days`` ago (default DSCHED_RETENTION_DAYS, or
    45 when that is off); returns how many. A task id older than that would run again."""
    if days is None:
        days = app_settings.RETENTION_DAYS or 45
    alias = using or app_settings.DATABASE
    cutoff = Now() - Value(timedelta(days=days), output_field=DurationField())
    deleted, _ = TaskRun.objects.using(alias).filter(started_ts__lt=cutoff).delete()
    return deleted
