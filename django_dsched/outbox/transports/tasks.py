"""Django's Tasks framework: enqueue the task mapped to the message's event type.

``django.tasks`` on Django 6; the ``django-tasks`` backport (``pip install
django-dsched[tasks]``) on Django 5.2. The mapping lives in settings, so only tasks named
there can be enqueued::

    "OPTIONS": {"TASKS": {"report.build": "reports.tasks.build_report"}}

The task is enqueued with one argument, the message's CloudEvents envelope (a JSON object;
its ``id`` is the idempotency key). Delivery succeeds when the task backend accepts it.

The run is reported back from the Tasks framework's own signals (``task_started``,
``task_finished`` with the result's status and error), received in the worker (the app's
``ready()`` connects them): a task whose one argument is a dsched envelope reports its
message's phases (:mod:`django_dsched.outbox.phases`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any

from django.utils.module_loading import import_string

from django_dsched.exceptions import ConfigurationError, DeliveryError
from django_dsched.outbox import phases
from django_dsched.outbox.messages import Message
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
    hands_off = True
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


# -- the run's outcome, reported from the worker ------------------------------------------------
def _message_id(task_result: Any) -> str | None:
    """The outbox message id of a task run with a dsched envelope as its one argument."""
    args: Sequence[Any] = getattr(task_result, "args", None) or ()
    if len(args) != 1 or getattr(task_result, "kwargs", None):
        return None
    envelope = args[0]
    if not isinstance(envelope, Mapping) or not str(envelope.get("source", "")).startswith(
        "/django-dsched/"
    ):
        return None
    id_ = envelope.get("id")
    return str(id_) if id_ else None


def _error(task_result: Any) -> str:
    errors = getattr(task_result, "errors", None) or []
    if not errors:
        return "the task failed"
    last = errors[-1]
    lines = [line for line in str(getattr(last, "traceback", "")).splitlines() if line.strip()]
    detail = lines[-1].strip() if lines else ""
    return f"{last.exception_class_path}: {detail}" if detail else last.exception_class_path


def task_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    message_id = _message_id(task_result)
    if message_id:
        phases.report_quietly(phases.report_started, message_id)


def task_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    message_id = _message_id(task_result)
    if not message_id:
        return
    status = str(getattr(task_result, "status", ""))
    if status == "SUCCESSFUL":
        phases.report_quietly(phases.report_completed, message_id)
    elif status == "FAILED":
        phases.report_quietly(phases.report_failed, message_id, _error(task_result))


def connect_signals() -> bool:
    """Receive the Tasks framework's started/finished signals (when it is installed)."""
    for module in ("django.tasks.signals", "django_tasks.signals"):
        try:
            signals = import_module(module)
        except ImportError:
            continue
        signals.task_started.connect(task_started, dispatch_uid="dsched_task_started")
        signals.task_finished.connect(task_finished, dispatch_uid="dsched_task_finished")
        return True
    return False
