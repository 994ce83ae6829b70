"""What the relay holds and records: a claimed message as transports see it, a send's outcome,
what a claim took, and who claims (:mod:`.claims` claims and settles them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Message:
    """One claimed outbox message, as transports see it.

    ``payload`` is its CloudEvents envelope as a dict; ``text`` the envelope's JSON text as the
    claim read it (None for a message made in Python), which is what goes on the wire
    (:func:`~django_dsched.outbox.transports.base.encode`). A claimed message is decoded only
    when something asks for ``payload`` (a handler, a task, the log of a failure): a broker
    transport sends the text as it is.
    """

    __slots__ = (
        "_payload",
        "attempt",
        "event_type",
        "host_id",
        "id",
        "priority",
        "size",
        "text",
        "topic",
    )

    def __init__(
        self,
        id: uuid.UUID,
        topic: str,
        event_type: str,
        payload: dict[str, Any] | None,
        attempt: int,
        priority: int = 0,
        size: int = 0,  # bytes of payload as JSON text, as the claim counted them
        *,
        text: str | None = None,
        host_id: uuid.UUID | None = None,  # the schedule's host (tenant), as claimed
    ) -> None:
        self.id = id
        self.topic = topic
        self.event_type = event_type
        self._payload = payload
        self.attempt = attempt
        self.priority = priority
        self.size = size
        self.text = text
        self.host_id = host_id

    @property
    def payload(self) -> dict[str, Any]:
        if self._payload is None:
            self._payload = json.loads(self.text) if self.text is not None else {}
        return self._payload

    def __repr__(self) -> str:
        return f"Message(id={self.id}, topic={self.topic!r}, attempt={self.attempt})"


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    message: Message
    error: str = ""
    permanent: bool = False
    delay: float = 0.0
    # When the send started and ended (time.monotonic()); started None: the transport hands
    # the work off to a worker, which reports the run's phases itself (outbox.phases).
    started: float | None = None
    ended: float | None = None

    @property
    def delivered(self) -> bool:
        return not self.error


@dataclass(frozen=True, slots=True)
class Settled:
    """What a settle wrote for one outcome (:func:`.settling.settle`)."""

    id: uuid.UUID
    status: str | None  # None: not written (the claim was lost)
    next_attempt_ts: datetime | None
    delivered_ts: datetime | None = None  # the database time the delivery was recorded


@dataclass(frozen=True, slots=True)
class Claimer:
    """Who claims, and the claim's rules."""

    relay_id: str
    visibility_timeout: float
    max_attempts: int
    topics: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a claim took, and when."""

    live: list[Message]  # to deliver, in order
    dead: list[Message]  # dead-lettered at claim
    # The claim's database time (microseconds since the epoch): the ``since_us`` of the next
    # claim; None if it found nothing.
    at_us: int | None = None
    # Why each message of ``dead`` was dead-lettered (its error as stored).
    why: dict[uuid.UUID, str] = field(default_factory=dict)
    # How long its longest-waiting message had been claimable (seconds; 0: none).
    waited: float = 0.0
