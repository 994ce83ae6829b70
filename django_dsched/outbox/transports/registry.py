"""Which transport delivers a message: ``DSCHED_TRANSPORTS`` and ``DSCHED_TRANSPORTS_BY_HOST``
read into a router, within the grants of each host.

Both settings hold route tables of one shape, read by one parser (:class:`RouteTable`):
keys are topics or glob patterns (``billing.*``); a topic takes its exact key, else the
longest matching pattern, else ``"*"``. ``DSCHED_TRANSPORTS_BY_HOST`` maps host ids
(tenants) to their own tables, searched before ``DSCHED_TRANSPORTS``, so a tenant can have
its own webhook URL, headers and secret for some topics and share the rest.

Tenancy is a boundary (:mod:`.grants`): a host's own table serves that host, and an entry of
``DSCHED_TRANSPORTS`` serves the hosts its ``HOSTS`` lists (``"*"``: every host), by
default the operator's alone (``DSCHED_DEFAULT_HOST_ID``). A message is routed among the
entries that serve its host only; one that none serves is refused (:class:`NotGranted`, a
dead letter at once with the reason), never sent elsewhere. Only the operator's own host
with no route at all is a retryable failure (a route may be deployed), as it always was.

Each entry is built once, when first needed, from ``BACKEND`` (an alias or the dotted path of
a :class:`Transport` subclass, read from settings, never from the database) and ``OPTIONS``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_dsched.conf import PREFIX, app_settings
from django_dsched.exceptions import (
    ConfigurationError,
    PermanentDeliveryError,
    TransportConfigError,
)
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import Problem, Transport, host_key, host_of
from django_dsched.outbox.transports.grants import (
    hosts_problem,
    operator_host,
    parse_hosts,
)

ALIASES = {
    "handlers": "django_dsched.outbox.transports.in_process.HandlerTransport",
    "tasks": "django_dsched.outbox.transports.tasks.TasksTransport",
    "redis": "django_dsched.outbox.transports.redis_streams.RedisStreamsTransport",
    "rabbitmq": "django_dsched.outbox.transports.rabbitmq.RabbitMQTransport",
    "webhook": "django_dsched.outbox.transports.webhook.WebhookTransport",
    "celery": "django_dsched.outbox.transports.celery.CeleryTransport",
    "sqs": "django_dsched.outbox.transports.sqs.SQSTransport",
}
# The keys of a route entry.
ENTRY_KEYS = frozenset({"BACKEND", "OPTIONS", "HOSTS", "CONCURRENCY"})
# The most a route's CONCURRENCY may be.
MAX_CONCURRENCY = 1024
# Most (host, topic) answers a router keeps: topics are the schedules' (any number, chosen by
# tenants), so the memo starts over past this many rather than grow without bound.
ROUTES_KEPT = 10_000


class NotGranted(PermanentDeliveryError):
    """No route granted to the message's host serves its topic: dead-lettered, never sent."""


def backend_class(backend: str) -> type[Transport]:
    cls = import_string(ALIASES.get(backend, backend))
    if not (isinstance(cls, type) and issubclass(cls, Transport)):
        raise ConfigurationError(f"{backend} is not a django_dsched Transport subclass")
    return cls


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
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            problems.append(f"{pattern!r}: unknown key(s) {', '.join(unknown)}")
        limit = entry.get("CONCURRENCY", 1)
        if not (isinstance(limit, int) and not isinstance(limit, bool)) or not (
            1 <= limit <= MAX_CONCURRENCY
        ):
            problems.append(
                f"{pattern!r}: CONCURRENCY must be a whole number from 1 to {MAX_CONCURRENCY}"
            )
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


def tenancy_problems(config: Any, by_host: Any) -> list[Problem]:
    """What the grants of DSCHED_TRANSPORTS and DSCHED_TRANSPORTS_BY_HOST let through, or how
    they are malformed (system checks dsched.E050 to E052). Tables E007 refuses are skipped."""
    operator = operator_host()
    tables: list[tuple[str, str | None, Any]] = [("DSCHED_TRANSPORTS", None, config)]
    if isinstance(by_host, Mapping):
        for host, table in by_host.items():
            try:
                tables.append(
                    (f"DSCHED_TRANSPORTS_BY_HOST[{host_key(host)!r}]", host_key(host), table)
                )
            except ValueError:
                continue
    problems: list[Problem] = []
    for where, owner, table in tables:
        if not isinstance(table, Mapping):
            continue
        for pattern, entry in table.items():
            if not isinstance(entry, Mapping):
                continue
            said = f"{where}[{pattern!r}]"
            if owner is not None:
                shared = owner != operator
                if "HOSTS" in entry:
                    problems.append(
                        (
                            "dsched.E050",
                            f"{said}: HOSTS has no place in a host's "
                            "own table, which serves that host alone",
                        )
                    )
            else:
                why = hosts_problem(entry["HOSTS"]) if "HOSTS" in entry else None
                if why is not None:
                    problems.append(
                        ("dsched.E050", f"{said}: {why} (it serves no host until fixed)")
                    )
                shared = parse_hosts(entry.get("HOSTS"), operator).shared(operator)
            options = entry.get("OPTIONS", {})
            try:
                cls = backend_class(str(entry.get("BACKEND")))
            except (ImportError, ConfigurationError):
                continue  # dsched.E007's
            if isinstance(options, Mapping):
                problems.extend(
                    (code, f"{said} ({cls.alias or cls.__name__}): {text}")
                    for code, text in cls.tenancy_problems(options, shared=shared)
                )
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
    """(host, topic) → transport instance, built lazily and reused; ``close()`` closes all.

    A topic's route for a host is its entry in the host's own table, else its entry in
    DSCHED_TRANSPORTS, which must then be granted to the host (:mod:`.grants`) and, for a
    host besides the operator's, fit to serve it (no dsched.E051 or E052 problem): a route
    is never swapped for another one. A host is read as the operator's when None.
    """

    def __init__(
        self,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        by_host: Mapping[Any, Mapping[str, Mapping[str, Any]]] | None = None,
    ) -> None:
        config = config if config is not None else app_settings.TRANSPORTS
        self.operator = operator_host()
        # The hosts each entry of DSCHED_TRANSPORTS serves (a host's own table serves it).
        self.grants = {
            key: parse_hosts(
                entry.get("HOSTS") if isinstance(entry, Mapping) else (), self.operator
            )
            for key, entry in config.items()
        }
        self.table = RouteTable(config)
        hosts = by_host if by_host is not None else app_settings.TRANSPORTS_BY_HOST
        self.host_tables = {host_key(host): RouteTable(table) for host, table in hosts.items()}
        self.config = self.table.config
        self._built: dict[Route, Transport] = {}
        # (host, topic) → its route, or why it has none and whether that is to be retried.
        self._routes: dict[tuple[Any, str], Route | tuple[bool, str]] = {}

    def route_for(self, topic: str, host: Any = None) -> Route:
        """The route of a topic for a host: the host's table first, then the entries of
        DSCHED_TRANSPORTS granted to it. :class:`NotGranted` when none serves it (for the
        operator's host with no route at all: :class:`TransportConfigError`, retryable)."""
        # Kept by the host as given (the relay gives each message's host as canonical text):
        # a message whose route is known parses no UUID.
        route = self._routes.get((host, topic))
        if route is None:
            route = self._find(topic, self.operator if host is None else host_key(host))
            if len(self._routes) >= ROUTES_KEPT:
                self._routes.clear()
            self._routes[(host, topic)] = route
        if not isinstance(route, Route):
            retryable, why = route
            raise TransportConfigError(why) if retryable else NotGranted(why)
        return route

    def _find(self, topic: str, host: str) -> Route | tuple[bool, str]:
        """The route, or why there is none: (whether to retry, the error's text)."""
        table = self.host_tables.get(host)
        key = table.key_for(topic) if table is not None else None
        if key is not None:
            route = Route(host, key)
        else:
            key = self.table.key_for(topic)
            if key is None:
                if host == self.operator:
                    return True, (
                        f"no transport is configured for topic {topic!r} (and no '*' entry in "
                        "DSCHED_TRANSPORTS)"
                    )
                return False, (
                    f"topic {topic!r} is not granted to host {host}: no route of "
                    "DSCHED_TRANSPORTS or of the host's DSCHED_TRANSPORTS_BY_HOST table serves it"
                )
            if not self.grants[key].serves(host):
                return False, (
                    f"topic {topic!r} is not granted to host {host}: its route {key!r} in "
                    "DSCHED_TRANSPORTS serves other hosts (grant it with HOSTS, or route the "
                    "topic in the host's DSCHED_TRANSPORTS_BY_HOST table)"
                )
            route = Route(None, key)
        unfit = self._unfit(route) if host != self.operator else None
        return (
            (False, f"topic {topic!r} is not granted to host {host}: {unfit}") if unfit else route
        )

    def _unfit(self, route: Route) -> str | None:
        """Why a route cannot serve a host besides the operator's (its dsched.E051 or E052
        problem, which ``check`` reports and which also holds when checks are skipped)."""
        entry = self.entry(route)
        try:
            cls = backend_class(str(entry.get("BACKEND")))
            problems = cls.tenancy_problems(entry.get("OPTIONS", {}), shared=True)
        except Exception:  # a bad BACKEND or OPTIONS: dsched.E007's, and failing the send
            return None
        if not problems:
            return None
        where = "DSCHED_TRANSPORTS" if route.host is None else "DSCHED_TRANSPORTS_BY_HOST"
        code, text = problems[0]
        return f"its route {route.key!r} in {where} cannot serve it ({code}: {text})"

    def refusal(self, topic: str, host: Any) -> str | None:
        """Why a message of ``host`` and ``topic`` would be refused (:class:`NotGranted`);
        None when a route serves it, or when only a route of the operator's is missing (a
        retryable failure, which a deploy may mend)."""
        try:
            self.route_for(topic, host)
        except NotGranted as exc:
            return str(exc)
        except TransportConfigError:
            return None
        return None

    def entry(self, route: Route) -> Mapping[str, Any]:
        table = self.table if route.host is None else self.host_tables[route.host]
        return table.config[route.key]

    def key_for(self, topic: str) -> str:
        return self.route_for(topic).key

    def for_route(self, route: Route) -> Transport:
        transport = self._built.get(route)
        if transport is None:
            entry = self.entry(route)
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


# The router of the doors (creates refuse a topic no route grants to the host), built from
# settings when first asked, again after a DSCHED_* setting changes (override_settings).
_router: list[Transports] = []


def router() -> Transports:
    """The process's router for questions about routes (it builds no transport)."""
    if not _router:
        _router.append(Transports())
    return _router[0]


@receiver(setting_changed)
def _forget_router(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(PREFIX):
        _router.clear()
