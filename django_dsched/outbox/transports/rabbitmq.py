"""RabbitMQ over AMQP 0-9-1 with publisher confirms (``pip install django-dsched[rabbitmq]``).

Options: ``URL`` (default ``amqp://guest:guest@localhost:5672/%2F``), ``EXCHANGE`` (default
``""``, the default exchange, which routes to the queue named by the routing key),
``ROUTING_KEY`` (default ``{topic}``; ``{topic}``, ``{type}`` and ``{host}`` are filled in),
``MANDATORY`` (default True: a message no queue takes is a failed attempt, not a silent
drop).

On the default exchange the routing key is a queue's name, so a route that serves hosts
besides the operator's must not let a topic pick it: such a route needs an ``EXCHANGE`` of
its own (its bindings decide), or a routing key that is fixed or has ``{host}`` before
``{topic}`` and ``{type}`` (system check ``dsched.E051``).

A send returns when the broker has confirmed the message (persistent, ``delivery_mode=2``).
pika's connections are not safe to share across threads: each send thread of a relay (a
route's ``CONCURRENCY``) has a connection of its own.
AMQP properties: ``message_id`` (the idempotency key), ``type`` (the event type),
``content_type`` ``application/cloudevents+json``, ``app_id`` ``django-dsched``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_dsched.exceptions import DeliveryError
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import (
    PerThread,
    Problem,
    Transport,
    destination_problem,
    encode,
    render,
)

DEFAULT_URL = "amqp://guest:guest@localhost:5672/%2F"
CONTENT_TYPE = "application/cloudevents+json"


class RabbitMQTransport(Transport):
    alias = "rabbitmq"
    requires = ("pika", "pika", "rabbitmq")
    options = frozenset({"URL", "EXCHANGE", "ROUTING_KEY", "MANDATORY", "TIMEOUT"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import pika

        self.pika = pika
        self.parameters = pika.URLParameters(options.get("URL", DEFAULT_URL))
        timeout = float(options.get("TIMEOUT", 10.0))
        self.parameters.socket_timeout = timeout
        self.parameters.blocked_connection_timeout = timeout
        self.parameters.stack_timeout = timeout
        self.exchange = options.get("EXCHANGE", "")
        self.routing_key = options.get("ROUTING_KEY", "{topic}")
        self.mandatory = bool(options.get("MANDATORY", True))
        # Each thread's (connection, channel).
        self._clients: PerThread[tuple[Any, Any]] = PerThread(_close_connection)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        if missing := cls.missing_library():
            return [*problems, *missing]
        import pika

        try:
            pika.URLParameters(options.get("URL", DEFAULT_URL))
        except Exception as exc:
            problems.append(f"URL is not an AMQP URL: {exc}")
        return problems

    @classmethod
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        """dsched.E051: on a shared route, the default exchange with a routing key (a queue's
        name there) that a schedule's topic or event type chooses."""
        if not shared or options.get("EXCHANGE", ""):
            return []
        problems = destination_problem("ROUTING_KEY", options.get("ROUTING_KEY", "{topic}"))
        return [
            (code, f"{text} (on the default exchange, EXCHANGE '', it names the queue)")
            for code, text in problems
        ]

    def _open(self) -> Any:
        client = self._clients.get()
        if client is None or not client[1].is_open:
            connection = self.pika.BlockingConnection(self.parameters)
            channel = connection.channel()
            channel.confirm_delivery()
            self._clients.set((connection, channel))
            return channel
        return client[1]

    def _publish(self, message: Message) -> None:
        properties = self.pika.BasicProperties(
            message_id=str(message.id),
            type=message.event_type,
            content_type=CONTENT_TYPE,
            app_id="django-dsched",
            delivery_mode=2,
        )
        self._open().basic_publish(
            exchange=self.exchange,
            routing_key=render(self.routing_key, message),
            body=encode(message),
            properties=properties,
            mandatory=self.mandatory,
        )

    def send(self, message: Message) -> None:
        from pika import exceptions

        try:
            try:
                self._publish(message)
            except (exceptions.AMQPConnectionError, exceptions.ChannelClosed):
                # An idle connection the broker dropped (missed heartbeats, restart):
                # reconnect once. If the first publish did reach the broker, this is a
                # duplicate, which the at-least-once contract allows.
                self._clients.drop()
                self._publish(message)
        except exceptions.UnroutableError:
            raise DeliveryError(
                f"no queue is bound for exchange {self.exchange!r} routing key "
                f"{render(self.routing_key, message)!r} (returned by the broker)"
            ) from None
        except exceptions.NackError:
            raise DeliveryError("the broker refused the message (nack)") from None
        except Exception:
            self._clients.drop()  # start the next send on a fresh connection
            raise

    def close(self) -> None:
        self._clients.close_all()


def _close_connection(client: tuple[Any, Any]) -> None:
    connection, _ = client
    if connection.is_open:
        connection.close()
