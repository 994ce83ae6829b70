"""Celery: each message becomes a Celery task, sent by name (``pip install django-dsched[celery]``).

The relay never imports the application's tasks: it sends a task message with
``send_task(name, args, kwargs, task_id=<message id>, ...)`` to the broker, and whatever Celery
worker consumes the queue runs it. The message id (= the event id) is the Celery task id, so a
task sent twice (at least once delivery) arrives twice with the same id; the worker-side
:class:`django_dsched.contrib.celery.ExactlyOnceTask` runs it once.

**From an event to a task** (one rule, applied to the event's ``data``):

* task name: the route's ``TASK`` option (``{topic}``, ``{type}`` and ``{host}`` are filled in;
  default ``"{type}"``, so an event type can simply be the task name); ``data["task"]`` only
  where the route opts in with ``TASK_FROM_DATA`` (then ``ALLOWED_TASKS`` is required,
  ``dsched.E052``); in either case the name must match ``ALLOWED_TASKS`` when it is set;
* positional arguments: ``data["args"]`` (a list, default ``[]``); keyword arguments:
  ``data["kwargs"]`` (an object, default ``{}``); no other key of ``data`` is passed;
* message options: the route's ``QUEUE``, ``EXCHANGE``, ``ROUTING_KEY``, ``PRIORITY``,
  ``HEADERS`` and ``EXPIRES``; the same key in lower case in ``data["options"]`` overrides one
  only if the route lists it in ``OPTIONS_FROM_DATA`` (headers are merged). ``expires`` is a
  number of seconds after the fire (the event's ``time``) or an ISO 8601 time;
* headers ``dsched_schedule_id``, ``dsched_slot``, ``dsched_fired_at`` and ``dsched_host_id``
  (the schedule's host, from the event, never from its data) are added (a task reads them as
  ``self.request.dsched_slot`` ...).

A malformed mapping (``args`` not a list, a task name outside ``ALLOWED_TASKS``, a task or an
option named in the data that the route does not take from it ...) is a permanent failure:
the message is dead-lettered at once with the reason.

**Tenants.** On a route that serves hosts besides the operator's, a schedule's topic or event
type must not choose the queue (``QUEUE``, ``EXCHANGE`` and ``ROUTING_KEY`` with ``{topic}`` or
``{type}`` need ``{host}`` before them; ``OPTIONS_FROM_DATA`` may not list ``queue``,
``exchange`` or ``routing_key``: ``dsched.E051``), nor the task (a ``TASK`` with ``{topic}`` or
``{type}`` needs ``ALLOWED_TASKS``: ``dsched.E052``).

**Confirmed sends.** A send returns only once the broker has the message: on RabbitMQ (``amqp://``,
``pyamqp://``) the connection uses publisher confirms (``confirm_publish``) and waits for the
broker's ack; on Redis the ``LPUSH`` has been answered. Only then does the relay mark the
message delivered. Other kombu transports confirm as far as their publish does.

Options: ``BROKER_URL`` (default ``amqp://guest:guest@localhost:5672//``) or ``APP`` (the dotted
path of your Celery app, whose broker, routes and settings are then used),
``BROKER_TRANSPORT_OPTIONS`` (merged into the connection's), ``TASK``, ``TASK_FROM_DATA``
(default False), ``ALLOWED_TASKS`` (glob patterns of task names that may be sent; default any,
for a route whose task name is fixed), ``OPTIONS_FROM_DATA`` (the keys of ``data["options"]``
honoured; default none), ``QUEUE``, ``EXCHANGE``, ``ROUTING_KEY``,
``PRIORITY`` (0-255, as Celery reads it), ``HEADERS``, ``EXPIRES`` (seconds after the fire),
``TIMEOUT`` (seconds for connecting and for each confirm, default 10; less than a quarter of
``DSCHED_RELAY_VISIBILITY_TIMEOUT``, checked as ``dsched.E007``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from django_dsched.conf import app_settings
from django_dsched.exceptions import PermanentDeliveryError
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import (
    PerThread,
    Problem,
    Transport,
    chosen_by_schedule,
    destination_problem,
    host_of,
    render,
)

if TYPE_CHECKING:
    from celery import Celery

DEFAULT_BROKER_URL = "amqp://guest:guest@localhost:5672//"
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
REDIS_SCHEMES = ("redis", "rediss", "sentinel")
# Keys of data["options"] and the route option each one overrides.
MESSAGE_OPTIONS = {
    "queue": "QUEUE",
    "exchange": "EXCHANGE",
    "routing_key": "ROUTING_KEY",
    "priority": "PRIORITY",
    "headers": "HEADERS",
    "expires": "EXPIRES",
}
# The options that choose where a task goes: never the data's, on a shared route.
DESTINATION_OPTIONS = ("queue", "exchange", "routing_key")


def broker_kind(url: str) -> str:
    """``"amqp"``, ``"redis"`` or the URL's scheme (what confirms a send depends on it)."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme in AMQP_SCHEMES:
        return "amqp"
    if scheme in REDIS_SCHEMES:
        return "redis"
    return scheme


def load_app(path: str) -> Celery:
    from celery import Celery

    app = import_string(path)
    if not isinstance(app, Celery):
        raise TypeError(f"{path} is not a Celery app")
    return app


def task_message(
    message: Message, route: Mapping[str, Any]
) -> tuple[str, list[Any], dict[str, Any], dict[str, Any]]:
    """``(task name, args, kwargs, options)`` for a message, by the rule in the module doc.

    Raises :class:`PermanentDeliveryError` when the event cannot make a task.
    """
    payload = message.payload
    data = payload.get("data")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PermanentDeliveryError("the event's data is not an object")
    name = _task_name(message, data, route)
    args = data.get("args", [])
    kwargs = data.get("kwargs", {})
    if not isinstance(args, list):
        raise PermanentDeliveryError('data["args"] must be a list')
    if not isinstance(kwargs, dict):
        raise PermanentDeliveryError('data["kwargs"] must be an object')
    overrides = _overrides(data, route)
    options: dict[str, Any] = {}
    for key, setting in MESSAGE_OPTIONS.items():
        value = overrides[key] if key in overrides else route.get(setting)
        if value is not None and key != "headers":
            options[key] = value
    for key in ("queue", "exchange", "routing_key"):
        if key in options:
            if not isinstance(options[key], str):
                raise PermanentDeliveryError(f"{key} must be a string")
            options[key] = render(options[key], message)
    priority = options.get("priority")
    if priority is not None and not (
        isinstance(priority, int) and not isinstance(priority, bool) and 0 <= priority <= 255
    ):
        raise PermanentDeliveryError("priority must be a whole number from 0 to 255")
    extra = overrides.get("headers", {})
    if not isinstance(extra, dict):
        raise PermanentDeliveryError('data["options"]["headers"] must be an object')
    headers = {**route.get("HEADERS", {}), **extra}
    if not all(isinstance(k, str) for k in headers):
        raise PermanentDeliveryError("headers must be an object")
    # Celery lays message headers over its own protocol headers: a header named "task" or
    # "id" would change which task runs (past ALLOWED_TASKS) or its id (past the dedupe).
    reserved = sorted(
        k for k in headers if k.lower() in PROTOCOL_HEADERS or k.startswith("dsched_")
    )
    if reserved:
        raise PermanentDeliveryError(
            f"headers may not set Celery's own fields: {', '.join(reserved)}"
        )
    headers.update(
        dsched_schedule_id=payload.get("subject"),
        dsched_slot=payload.get("scheduledtime"),
        dsched_fired_at=payload.get("time"),
        dsched_host_id=host_of(message),
    )
    options["headers"] = headers
    if "expires" in options:
        options["expires"] = _expiry(options["expires"], payload.get("time"))
    return name, args, kwargs, options


def _task_name(message: Message, data: dict[str, Any], route: Mapping[str, Any]) -> str:
    """The task a message sends: the route's ``TASK``, or ``data["task"]`` where the route
    takes it from the data; refused outside ``ALLOWED_TASKS``."""
    name = data.get("task")
    if name is not None and not route.get("TASK_FROM_DATA"):
        raise PermanentDeliveryError(
            f'data["task"] names a task ({name!r}), but this route does not take the task '
            "from the data (TASK_FROM_DATA is off): its task is its TASK option's"
        )
    if name is None:
        name = render(route.get("TASK", "{type}"), message)
    if not isinstance(name, str) or not name.strip():
        raise PermanentDeliveryError('data["task"] must be a non-empty string')
    allowed = route.get("ALLOWED_TASKS")
    if allowed is None and route.get("TASK_FROM_DATA"):
        raise PermanentDeliveryError("TASK_FROM_DATA needs ALLOWED_TASKS (dsched.E052)")
    if allowed is not None and not any(fnmatchcase(name, pattern) for pattern in allowed):
        raise PermanentDeliveryError(f"task {name!r} is not in ALLOWED_TASKS")
    return name


def _overrides(data: dict[str, Any], route: Mapping[str, Any]) -> dict[str, Any]:
    """``data["options"]``, checked against what the route takes from the data."""
    overrides = data.get("options", {})
    if not isinstance(overrides, dict):
        raise PermanentDeliveryError('data["options"] must be an object')
    unknown = sorted(set(overrides) - set(MESSAGE_OPTIONS))
    if unknown:
        raise PermanentDeliveryError(
            f'unknown key(s) in data["options"]: {", ".join(unknown)} '
            f"(allowed: {', '.join(MESSAGE_OPTIONS)})"
        )
    taken = route.get("OPTIONS_FROM_DATA") or ()
    refused = [key for key in overrides if key not in taken]
    if refused:
        raise PermanentDeliveryError(
            f'data["options"] sets {", ".join(refused)}, which this route does not take from '
            f"the data (OPTIONS_FROM_DATA: {list(taken)})"
        )
    return overrides


# Celery's message protocol (v2) headers, which a user header must never replace.
PROTOCOL_HEADERS = frozenset(
    {
        "lang", "task", "id", "root_id", "parent_id", "group", "group_index", "meth", "shadow",
        "eta", "expires", "countdown", "retries", "timelimit", "argsrepr", "kwargsrepr",
        "origin", "ignore_result", "replaced_task_nesting", "stamped_headers", "stamps",
        "chord", "callbacks", "errbacks", "chain", "reply_to", "correlation_id",
    }
)  # fmt: skip


def broker_url(options: Mapping[str, Any]) -> str:
    """The broker a route's Celery transport writes to: its APP's, or BROKER_URL."""
    if options.get("APP"):
        conf = load_app(options["APP"]).conf
        return str(conf.broker_write_url or conf.broker_url or "")
    return str(options.get("BROKER_URL", DEFAULT_BROKER_URL))


def _expiry(value: Any, fired_at: Any) -> datetime:
    """A Celery ``expires`` option as a time: seconds after the fire, or an ISO 8601 time."""
    try:
        if isinstance(value, str):
            when = datetime.fromisoformat(value)
            if when.tzinfo is None:
                raise ValueError("no offset")
            return when
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return datetime.fromisoformat(str(fired_at)) + timedelta(seconds=value)
    except ValueError:
        pass
    raise PermanentDeliveryError(
        f"expires must be seconds after the fire or an ISO 8601 time with an offset: {value!r}"
    )


class CeleryTransport(Transport):
    alias = "celery"
    requires = ("celery", "Celery", "celery")
    hands_off = True
    options = frozenset(
        {
            "APP",
            "BROKER_URL",
            "BROKER_TRANSPORT_OPTIONS",
            "TASK",
            "TASK_FROM_DATA",
            "ALLOWED_TASKS",
            "OPTIONS_FROM_DATA",
            "TIMEOUT",
            *MESSAGE_OPTIONS.values(),
        }
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        from celery import Celery

        self.timeout = float(options.get("TIMEOUT", 10.0))
        url = broker_url(options)
        if options.get("APP"):
            self.app = load_app(options["APP"])
        else:
            self.app = Celery("django_dsched.relay", broker=url, set_as_current=False)
            self.app.conf.broker_connection_timeout = self.timeout
        self.kind = broker_kind(url)
        transport_options: dict[str, Any] = {}
        if self.kind == "amqp":
            transport_options = {
                "confirm_publish": True,
                "read_timeout": self.timeout,
                "write_timeout": self.timeout,
            }
        elif self.kind == "redis":
            transport_options = {
                "socket_timeout": self.timeout,
                "socket_connect_timeout": self.timeout,
            }
        self.transport_options = {
            **transport_options,
            **options.get("BROKER_TRANSPORT_OPTIONS", {}),
        }
        # Each send thread's (connection, producer): kombu's are not safe to share.
        self._clients: PerThread[tuple[Any, Any]] = PerThread(_release)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        if missing := cls.missing_library():
            return [*problems, *missing]
        if options.get("APP"):
            if "BROKER_URL" in options:
                problems.append("give APP or BROKER_URL, not both")
            try:
                load_app(options["APP"])
            except (ImportError, TypeError) as exc:
                problems.append(f"APP: {exc}")
        elif not isinstance(options.get("BROKER_URL", DEFAULT_BROKER_URL), str):
            problems.append("BROKER_URL must be a string")
        for name in ("BROKER_TRANSPORT_OPTIONS", "HEADERS"):
            if not isinstance(options.get(name, {}), Mapping):
                problems.append(f"{name} must be a dict")
        for name in ("TASK", "QUEUE", "EXCHANGE", "ROUTING_KEY"):
            if name in options and not isinstance(options[name], str):
                problems.append(f"{name} must be a string")
        allowed = options.get("ALLOWED_TASKS")
        if allowed is not None and not (
            isinstance(allowed, list | tuple) and all(isinstance(p, str) for p in allowed)
        ):
            problems.append("ALLOWED_TASKS must be a list of task name patterns")
        if not isinstance(options.get("TASK_FROM_DATA", False), bool):
            problems.append("TASK_FROM_DATA must be True or False")
        taken = options.get("OPTIONS_FROM_DATA", [])
        if not (isinstance(taken, list | tuple) and all(key in MESSAGE_OPTIONS for key in taken)):
            problems.append(
                f"OPTIONS_FROM_DATA must be a list of keys of data['options']: "
                f"{', '.join(MESSAGE_OPTIONS)}"
            )
        priority = options.get("PRIORITY")
        if priority is not None and not (isinstance(priority, int) and 0 <= priority <= 255):
            problems.append("PRIORITY must be a whole number from 0 to 255")
        for name in ("EXPIRES", "TIMEOUT"):
            value = options.get(name)
            if value is not None and not (
                isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            ):
                problems.append(f"{name} must be a positive number of seconds")
        timeout = options.get("TIMEOUT", 10.0)
        visibility = app_settings.RELAY_VISIBILITY_TIMEOUT
        if (
            isinstance(timeout, int | float)
            and isinstance(visibility, int | float)
            and timeout * 4 >= visibility
        ):
            problems.append(
                f"TIMEOUT ({timeout}s) must be less than a quarter of "
                f"DSCHED_RELAY_VISIBILITY_TIMEOUT ({visibility}s): a send may connect and wait "
                "for the broker's confirm, each up to TIMEOUT, and must end within half the "
                "visibility timeout, or another relay could claim the message meanwhile"
            )
        return problems

    @classmethod
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        """dsched.E052: a task chosen by the data (``TASK_FROM_DATA``), or on a shared route
        by a topic or event type (``TASK``), with no ``ALLOWED_TASKS``; dsched.E051: on a
        shared route, a queue chosen by the schedule."""
        problems: list[Problem] = []
        task = options.get("TASK", "{type}")
        chosen = isinstance(task, str) and shared and chosen_by_schedule(task)
        if options.get("ALLOWED_TASKS") is None and (options.get("TASK_FROM_DATA") or chosen):
            why = (
                "TASK_FROM_DATA lets a schedule's data name the task"
                if options.get("TASK_FROM_DATA")
                else f"TASK {task!r} lets a schedule's topic or event type name the task, and "
                "the route serves hosts besides the operator's"
            )
            problems.append(
                (
                    "dsched.E052",
                    f"{why}: list the tasks it may send in ALLOWED_TASKS (glob patterns), or "
                    "send a fixed TASK",
                )
            )
        if not shared:
            return problems
        for name in ("QUEUE", "EXCHANGE", "ROUTING_KEY"):
            problems.extend(destination_problem(name, options.get(name)))
        taken = options.get("OPTIONS_FROM_DATA") or ()
        chooses = [key for key in DESTINATION_OPTIONS if key in taken]
        if chooses:
            problems.append(
                (
                    "dsched.E051",
                    f"OPTIONS_FROM_DATA lets a schedule's data choose the {', '.join(chooses)}, "
                    "and the route serves hosts besides the operator's: set them in the route "
                    "(with {host} to keep hosts apart)",
                )
            )
        return problems

    def _open(self) -> Any:
        client = self._clients.get()
        if client is None:
            connection = self.app.connection_for_write(
                transport_options=self.transport_options, connect_timeout=self.timeout
            )
            client = (connection, self.app.amqp.Producer(connection, auto_declare=False))
            self._clients.set(client)
        return client[1]

    def send(self, message: Message) -> None:
        name, args, kwargs, options = task_message(message, self.settings)
        if self.kind == "amqp":
            options["confirm_timeout"] = self.timeout
        try:
            self.app.send_task(
                name,
                args,
                kwargs,
                task_id=str(message.id),
                producer=self._open(),
                # One reconnect after a dropped connection, then the relay's own retries.
                retry=True,
                retry_policy={
                    "max_retries": 1,
                    "interval_start": 0,
                    "interval_step": 0.5,
                    "interval_max": 0.5,
                },
                **options,
            )
        except Exception:
            self._clients.drop()  # start the next send on a fresh connection
            raise

    def close(self) -> None:
        self._clients.close_all()


def _release(client: tuple[Any, Any]) -> None:
    client[0].release()
