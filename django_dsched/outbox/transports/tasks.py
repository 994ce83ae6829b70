"""Django's Tasks framework: enqueue the task mapped to the message's event type.

``django.tasks`` on Django 6; the ``django-tasks`` backport (``pip install
django-dsched[tasks]``) on Django 5.2. The mapping lives in settings, so only tasks named
there can be enqueued::

    "OPTIONS": {"TASKS": {"report.build": "reports.tasks.build_report"}}

The task is enqueued with one argument, the message's CloudEvents envelope (a JSON object;
its ``id`` is the idempotency key). Delivery succeeds when the task backend accepts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from django.utils.module_loading import import_string

from django_dsched.exceptions import ConfigurationError, DeliveryError
from django_dsched.outbox.claims import Message
from django_dsched.outbox.transports.base import Transport


def task_class() -> type:
    """``Task`` from ``django.tasks`` (Django 6+) or the ``django_tasks`` backport."""
    for module in ("django.tasks", "django_tasks.base"):
        try:
            task: type = import_module(module).Task
        except ImportError:
            continue
        return task
    raise ConfigurationError(
        "The tasks transport needs Django 6, or the django-tasks backport on "
        "Django 5.2: pip install 'django-dsched[tasks]'."
    )


def load_tasks(mapping: Mapping[str, str]) -> dict[str, Any]:
    """Import the mapped tasks (dotted paths from settings) and check each is a Task."""
    task_type = task_class()
    tasks = {}
    for event_type, path in mapping.items():
        obj = import_string(path)
        if not isinstance(obj, task_type):
            raise ConfigurationError(f"{path} is not a task (decorate the function with @task).")
        tasks[event_type] = obj
    return tasks


class TasksTransport(Transport):
    alias = "tasks"
    options = frozenset({"TASKS"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tasks = load_tasks(options.get("TASKS", {}))

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        mapping = options.get("TASKS", {})
        if not isinstance(mapping, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            return [*problems, "TASKS must map event types to dotted paths of tasks"]
        try:
            load_tasks(mapping)
        except (ImportError, ConfigurationError) as exc:
            problems.append(str(exc))
        return problems

    def send(self, message: Message) -> None:
        task = self.tasks.get(message.event_type)
        if task is None:
            raise DeliveryError(f"no task is mapped to event type {message.event_type!r}")
        task.enqueue(message.payload)
