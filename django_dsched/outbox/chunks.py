"""A batch cut for sending: runs of messages that share a transport, each cut to the
transport's batch size, with the function that sends it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Any

from django_dsched.outbox.claims import Message
from django_dsched.outbox.transports import Transport, Transports
from django_dsched.outbox.transports.base import host_of

# Sends a chunk: the error of each message, in order (None: delivered).
Send = Callable[[Sequence[Message]], list[BaseException | None]]


def chunks(
    transports: Transports, messages: list[Message]
) -> list[tuple[list[Message], Send, bool]]:
    """Runs of messages that share a transport, cut to the transport's batch size, each
    with whether the transport hands the work off to workers that report its phases."""
    cut = []
    hosts: dict[Any, str | None] = {}  # host_of() by host id, once per batch

    def route(message: Message) -> tuple[str, str | None]:
        # The claim returns each message's host id (the envelope's source names it).
        key = message.host_id
        host = hosts.get(key, hosts)
        if host is hosts:
            host = hosts[key] = host_of(message)
        return message.topic, host  # type: ignore[return-value]

    for _, group in groupby(messages, key=route):
        run = list(group)
        try:
            transport: Transport | None = transports.for_message(run[0])
        except Exception as exc:
            transport, error = None, exc
        if transport is None:
            cut.append((run, _failing(error), False))
            continue
        size = max(1, transport.batch_size)
        for start in range(0, len(run), size):
            cut.append((run[start : start + size], transport.send_many, transport.hands_off))
    return cut


def _failing(error: BaseException) -> Send:
    def send(messages: Sequence[Message]) -> list[BaseException | None]:
        return [error] * len(messages)

    return send
