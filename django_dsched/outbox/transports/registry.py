"""Which transport delivers a topic: ``DSCHED_TRANSPORTS`` read into a router.

Keys are topics or glob patterns (``billing.*``); a topic takes its exact key, else the
longest matching pattern, else ``"*"``. Each entry is built once, when first needed, from
``BACKEND`` (an alias or the dotted path of a :class:`Transport` subclass, read from settings,
never from the database) and ``OPTIONS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

from django.utils.module_loading import import_string

from django_dsched.conf import app_settings
from django_dsched.exceptions import ConfigurationError, TransportConfigError
from django_dsched.outbox.transports.base import Transport

ALIASES = {
    "handlers": "django_dsched.outbox.transports.in_process.HandlerTransport",
    "tasks": "django_dsched.outbox.transports.tasks.TasksTransport",
    "redis": "django_dsched.outbox.transports.redis_streams.RedisStreamsTransport",
    "rabbitmq": "django_dsched.outbox.transports.rabbitmq.RabbitMQTransport",
    "webhook": "django_dsched.outbox.transports.webhook.WebhookTransport",
    "celery": "django_dsched.outbox.transports.celery.CeleryTransport",
}


def backend_class(backend: str) -> type[Transport]:
    cls = import_string(ALIASES.get(backend, backend))
    if not (isinstance(cls, type) and issubclass(cls, Transport)):
        raise ConfigurationError(f"{backend} is not a django_dsched Transport subclass")
    return cls


def config_problems(config: Any) -> list[str]:
    """What is wrong with a DSCHED_TRANSPORTS value (for the system check)."""
    if not isinstance(config, Mapping) or not config:
        return ["DSCHED_TRANSPORTS must be a non-empty dict of topic patterns to entries"]
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
            problems.append(f"{pattern!r}: BACKEND {entry['BACKEND']!r}: {exc}")
            continue
        problems.extend(
            f"{pattern!r} ({cls.alias or cls.__name__}): {p}" for p in cls.check_options(options)
        )
    return problems


class Transports:
    """Topic → transport instance, built lazily and reused; ``close()`` closes them all."""

    def __init__(self, config: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.config = dict(config if config is not None else app_settings.TRANSPORTS)
        self._patterns = sorted(
            (p for p in self.config if p != "*" and any(c in p for c in "*?[")),
            key=len,
            reverse=True,
        )
        self._built: dict[str, Transport] = {}
        self._by_topic: dict[str, str] = {}

    def key_for(self, topic: str) -> str:
        key = self._by_topic.get(topic)
        if key is None:
            if topic in self.config:
                key = topic
            else:
                key = next((p for p in self._patterns if fnmatchcase(topic, p)), "*")
            if key not in self.config:
                raise TransportConfigError(
                    f"no transport is configured for topic {topic!r} (and no '*' entry in "
                    "DSCHED_TRANSPORTS)"
                )
            self._by_topic[topic] = key
        return key

    def for_topic(self, topic: str) -> Transport:
        key = self.key_for(topic)
        transport = self._built.get(key)
        if transport is None:
            entry = self.config[key]
            transport = backend_class(entry["BACKEND"])(**entry.get("OPTIONS", {}))
            self._built[key] = transport
        return transport

    def close(self) -> None:
        built, self._built = self._built, {}
        for transport in built.values():
            transport.close()
