"""Which transport delivers a message: ``DSCHED_TRANSPORTS`` and ``DSCHED_TRANSPORTS_BY_HOST``
read into a router.

Both settings hold route tables of one shape, read by one parser (:class:`RouteTable`):
keys are topics or glob patterns (``billing.*``); a topic takes its exact key, else the
longest matching pattern, else ``"*"``. ``DSCHED_TRANSPORTS_BY_HOST`` maps host ids
(tenants) to their own tables, searched before ``DSCHED_TRANSPORTS``, so a tenant can have
its own webhook URL, headers and secret for some topics and share the rest.

Each entry is built once, when first needed, from ``BACKEND`` (an alias or the dotted path of
a :class:`Transport` subclass, read from settings, never from the database) and ``OPTIONS``.
"""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from django.utils.module_loading import import_string

from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError, TransportConfigError
from django_dsched.outbox.claims import Message
from django_dsched.outbox.transports.base import Transport

ALIASES = {
    "handlers": "django_dsched.outbox.transports.in_process.HandlerTransport",
    "tasks": "django_dsched.outbox.transports.tasks.TasksTransport",
    "redis": "django_dsched.outbox.transports.redis_streams.RedisStreamsTransport",
    "rabbitmq": "django_dsched.outbox.transports.rabbitmq.RabbitMQTransport",
    "webhook": "django_dsched.outbox.transports.webhook.WebhookTransport",
    "celery": "django_dsched.outbox.transports.celery.CeleryTransport",
    "sqs": "django_dsched.outbox.transports.sqs.SQSTransport",
}

# The fire path writes the host into the CloudEvent's source: '/django-dsched/<host_id>'.
SOURCE_PREFIX = "/django-dsched/"


def backend_class(backend: str) -> type[Transport]:
    cls = import_string(ALIASES.get(backend, backend))
    if not (isinstance(cls, type) and issubclass(cls, Transport)):
        raise ConfigurationError(f"{backend} is not a django_dsched Transport subclass")
    return cls


def host_key(host: Any) -> str:
    """A host id as route tables key it (canonical UUID text); ``ValueError`` if not one."""
    return str(host if isinstance(host, uuid.UUID) else uuid.UUID(str(host)))


def host_of(message: Message) -> str | None:
    """The host (tenant) id of a message, from the envelope's ``source``; None if unknown."""
    host = getattr(message, "host_id", None)
    if host is None:
        source = message.payload.get("source") if isinstance(message.payload, dict) else None
        if not (isinstance(source, str) and source.startswith(SOURCE_PREFIX)):
            return None
        host = source[len(SOURCE_PREFIX) :]
    try:
        return host_key(host)
    except ValueError:
        return None


def config_problems(config: Any) -> list[str]:
    """What is wrong with one route table (a DSCHED_TRANSPORTS value, or a host's table)."""
    if not isinstance(config, Mapping) or not config:
        return ["must be a non-empty dict of topic patterns to entries"]
    problems = []
    for pattern, entry in config.items():
        if not isinstance(pattern, str) or not pattern:
            problems.append(f"{pattern!r}: keys must be topics or glob patterns")
            continue
        if not isinstance(entry, Mapping) or not isinstance(entry.get("BACKEND"), str):
            problems.append(f"{pattern!r}: each entry needs a BACKEND string")
            continue
        unknown = sorted(set(entry) - {"BACKEND", "OPTIONS"})
        if unknown:
            problems.append(f"{pattern!r}: unknown key(s) {', '.join(unknown)}")
        options = entry.get("OPTIONS", {})
        if not isinstance(options, Mapping):
            problems.append(f"{pattern!r}: OPTIONS must be a dict")
            continue
        try:
            cls = backend_class(entry["BACKEND"])
        except (ImportError, ConfigurationError) as exc:
            close = difflib.get_close_matches(str(entry["BACKEND"]), sorted(ALIASES), n=1)
            meant = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{pattern!r}: BACKEND {entry['BACKEND']!r}: {exc}{meant}")
            continue
        problems.extend(
            f"{pattern!r} ({cls.alias or cls.__name__}): {p}" for p in cls.check_options(options)
        )
    return problems


def routing_problems(config: Any, by_host: Any) -> list[str]:
    """What is wrong with DSCHED_TRANSPORTS and DSCHED_TRANSPORTS_BY_HOST (system check)."""
    problems = [f"DSCHED_TRANSPORTS: {p}" for p in config_problems(config)]
    if not isinstance(by_host, Mapping):
        return [*problems, "DSCHED_TRANSPORTS_BY_HOST must be a dict of host ids to tables"]
    for host, table in by_host.items():
        try:
            name = host_key(host)
        except ValueError:
            problems.append(f"DSCHED_TRANSPORTS_BY_HOST: {host!r} is not a host id (a UUID)")
            continue
        problems.extend(f"DSCHED_TRANSPORTS_BY_HOST[{name!r}]: {p}" for p in config_problems(table))
    return problems


class RouteTable:
    """One table of routes: topic or glob pattern → entry."""

    def __init__(self, config: Mapping[str, Mapping[str, Any]]) -> None:
        self.config = dict(config)
        self._patterns = sorted(
            (p for p in self.config if p != "*" and any(c in p for c in "*?[")),
            key=len,
            reverse=True,
        )

    def key_for(self, topic: str) -> str | None:
        """The entry ``topic`` takes: exact, else longest matching pattern, else "*"."""
        if topic in self.config:
            return topic
        key = next((p for p in self._patterns if fnmatchcase(topic, p)), "*")
        return key if key in self.config else None


class Route(NamedTuple):
    """An entry of the routing settings: its host's table (None: DSCHED_TRANSPORTS) and key."""

    host: str | None
    key: str


class Transports:
    """(host, topic) → transport instance, built lazily and reused; ``close()`` closes all."""

    def __init__(
        self,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        by_host: Mapping[Any, Mapping[str, Mapping[str, Any]]] | None = None,
    ) -> None:
        self.table = RouteTable(config if config is not None else app_settings.TRANSPORTS)
        hosts = by_host if by_host is not None else app_settings.TRANSPORTS_BY_HOST
        self.host_tables = {host_key(host): RouteTable(table) for host, table in hosts.items()}
        self.config = self.table.config
        self._built: dict[Route, Transport] = {}
        self._routes: dict[tuple[str | None, str], Route] = {}

    def route_for(self, topic: str, host: Any = None) -> Route:
        """The route of a topic for a host: the host's table first, then DSCHED_TRANSPORTS."""
        host = None if host is None else host_key(host)
        route = self._routes.get((host, topic))
        if route is None:
            table = self.host_tables.get(host) if host is not None else None
            key = table.key_for(topic) if table is not None else None
            if key is not None:
                route = Route(host, key)
            else:
                key = self.table.key_for(topic)
                if key is None:
                    raise TransportConfigError(
                        f"no transport is configured for topic {topic!r} (and no '*' entry in "
                        "DSCHED_TRANSPORTS)"
                    )
                route = Route(None, key)
            self._routes[(host, topic)] = route
        return route

    def key_for(self, topic: str) -> str:
        return self.route_for(topic).key

    def for_route(self, route: Route) -> Transport:
        transport = self._built.get(route)
        if transport is None:
            table = self.table if route.host is None else self.host_tables[route.host]
            entry = table.config[route.key]
            transport = backend_class(entry["BACKEND"])(**entry.get("OPTIONS", {}))
            self._built[route] = transport
        return transport

    def for_topic(self, topic: str, host: Any = None) -> Transport:
        return self.for_route(self.route_for(topic, host))

    def for_message(self, message: Message) -> Transport:
        return self.for_topic(message.topic, host_of(message))

    def close(self) -> None:
        built, self._built = self._built, {}
        for transport in built.values():
            transport.close()
