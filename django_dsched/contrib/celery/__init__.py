"""Worker-side help for the Celery transport: run each dsched task once per message id.

Add ``"django_dsched.contrib.celery"`` to ``INSTALLED_APPS`` (its table records the task ids
that ran) and give your tasks the base class::

    from django_dsched.contrib.celery import ExactlyOnceTask

    @app.task(base=ExactlyOnceTask, name="reports.build")
    def build(report_id): ...

See :mod:`django_dsched.contrib.celery.tasks` and docs/migrating-from-celery-beat.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExactlyOnceTask", "purge_task_runs"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so the app can be listed in INSTALLED_APPS (and its models
    # loaded) before Celery is imported.
    if name in __all__:
        from django_dsched.contrib.celery import tasks

        return getattr(tasks, name)
    raise AttributeError(name)
