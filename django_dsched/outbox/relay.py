"""The ``run_relay`` loop: claim pending outbox messages, deliver them, record the outcome.

Any number of relays run at once, anywhere. Each round, a relay claims a batch (higher priority
first; within a priority, what became claimable since its previous claim first, then the
backlog, oldest first, with a share of the batch kept for it; at most ``RELAY_BATCH_SIZE``
messages and ``RELAY_BATCH_BYTES`` of payload) with ``SKIP LOCKED`` and a visibility timeout
(:mod:`.claims`), sends each message with the transport its topic is configured for
(:mod:`.transports`), then records every outcome in one statement: DELIVERED, a retry after a
jittered exponential delay, or DELIVERY_FAILED (a dead letter) once the attempts are used up.
If the database refuses that statement for one row's values, the outcomes are recorded one by
one, a refused one as a failed attempt (:mod:`.outcomes`).

Delivery is at least once: a relay that dies after sending and before recording leaves the
message claimed until its visibility timeout, then another relay sends it again, with the same
id (the idempotency key consumers dedupe on).

An idle relay sleeps until the next retry is due or the poll interval passes; the fire
statement's NOTIFY on ``dsched_outbox`` wakes it at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from django.db import Error, connections

from django_dsched.conf import app_settings
from django_dsched.enums import DeliveryStatus
from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.models.validators import make_storable_text
from django_dsched.outbox.claims import (
    ERROR_MAX_CHARS,
    Claimed,
    Claimer,
    DeliveryOutcome,
    Message,
    Settled,
    claim_batch,
    extend,
    release,
    seconds_until_claimable,
)
from django_dsched.outbox.handlers import autodiscover
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.outcomes import Recorded, record
from django_dsched.outbox.tally import DEAD_LETTER, DELIVERED, LOST, RETRY, slot_of
from django_dsched.outbox.transports import Transport, Transports
from django_dsched.outbox.transports.registry import host_of
from django_dsched.runtime import binding
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop, first_line, retry_delay

if TYPE_CHECKING:
    from django_dsched.metrics.relay import RelayMetrics  # needs prometheus_client

logger = get_logger(__name__)

# Renew claims once this share of the visibility timeout has passed since the last renewal.
RENEW_AFTER = 0.5

# A claim locks up to its count of rows and reads their payloads to count bytes, then keeps
# the prefix within the byte cap: ask for about as many as the cap takes at the last claim's
# bytes per message, with this much to spare, not the whole batch size (10,000 rows of 64 KiB
# events to keep 128 would cost seconds a round).
CLAIM_SPARE = 1.25

# A claim asks for no more messages than the relay sent in about this many seconds at the last
# batch's pace: a fast transport gets whole batches (``RELAY_BATCH_SIZE``), a slow endpoint
# small ones, so a relay never holds more claims than it can send soon (other relays deliver
# the rest) and a message waits behind the others of its batch for about this long at most.
BATCH_SECONDS = 1.0

# Under a backlog (two claims in a row came back full, with at least this many messages), the
# relay claims its next batch on a thread of its own while it sends the end of this one: the
# database claims while Python sends. Smaller batches are not worth a second session.
CLAIM_AHEAD_MIN = 100
# The claim ahead starts once what is left of the batch in hand would take no longer to send
# than this many times the last claim took: late enough that a send that hangs before the end
# of the batch holds no batch claimed ahead, and a message arriving meanwhile is not queued
# behind one; early enough that the claim is done when the batch is.
AHEAD_LEAD = 2.0


def describe(exc: BaseException) -> str:
    """A failed send's error as ``last_error`` says it: ``Type: message``, or the type alone,
    storable (NUL and lone surrogates escaped) and at most ``ERROR_MAX_CHARS`` long.

    The exception comes from a transport or a handler: its text may hold anything an
    endpoint sent, and its ``str()`` may itself raise, which must not stop the relay.
    """
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception as failure:
        return f"{name} (its message could not be read: {type(failure).__name__})"
    return make_storable_text(f"{name}: {text}" if text else name, ERROR_MAX_CHARS)


@dataclass
class RelayStats:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lost_claims: int = 0
    # Outcomes the database refused: recorded as a failed attempt instead, or (unrecorded)
    # not even that.
    refused: int = 0
    unrecorded: int = 0
    released: int = 0
    batches: int = 0
    db_errors: int = 0


class Relay(DatabaseLoop):
    kind = "relay"
    channels = ("dsched_outbox",)
    stats: RelayStats

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        batch_size: int | None = None,
        batch_bytes: int | None = None,
        poll_interval: float | None = None,
        topics: Sequence[str] | None = None,
        transports: Transports | None = None,
        using: str | None = None,
        metrics: RelayMetrics | None = None,
    ) -> None:
        super().__init__(instance_id, using)
        # Prometheus series to feed (None: metrics off; see django_dsched.metrics).
        self.metrics = metrics
        # The transport of each message of the batch in hand, for the metrics' labels.
        self._labels: dict[uuid.UUID, str] = {}
        self.batch_size = batch_size or app_settings.RELAY_BATCH_SIZE
        self.batch_bytes = batch_bytes or app_settings.RELAY_BATCH_BYTES
        self.poll_interval = poll_interval or app_settings.RELAY_POLL_INTERVAL
        self.topics = list(topics) if topics else None
        self.claimer = Claimer(
            relay_id=self.instance_id,
            visibility_timeout=float(app_settings.RELAY_VISIBILITY_TIMEOUT),
            max_attempts=int(app_settings.RELAY_MAX_ATTEMPTS),
            topics=self.topics,
        )
        self.retry_base = float(app_settings.RELAY_RETRY_BASE)
        self.retry_max = float(app_settings.RELAY_RETRY_MAX)
        self.transports = transports if transports is not None else Transports()
        interval = app_settings.RELAY_HEARTBEAT_INTERVAL
        self.heartbeat = ClaimHeartbeat(
            self.claimer,
            float(interval) if interval else self.claimer.visibility_timeout / 4,
            self.using,
            max_run=app_settings.RELAY_MAX_RUN_SECONDS,
        )
        self.stats = RelayStats()
        self._claimed_last = 0
        self._message_bytes = 0.0  # mean payload bytes per message of the last claim
        self._send_seconds = 0.0  # mean seconds to send one message of the last batch
        self._claim_seconds = 0.0  # how long the last claim took
        # Whether the batch in hand came from a full claim (a backlog): claim the next one
        # ahead, with at most this many bytes of payload (None: no).
        self._ahead_bytes: int | None = None
        # The next batch's claim, running on the claim-ahead thread (with the limit it asked).
        self._ahead: tuple[Future[tuple[Claimed, float]], int] | None = None
        self._ahead_pool: ThreadPoolExecutor | None = None
        self._ahead_session = False  # whether the claim-ahead thread holds a session
        self._was_full = False  # whether the last claim came back full
        # The database time of the last claim that found rows: what became claimable after it
        # is on time and claimed before the backlog (claims.claim_batch).
        self._since: int | None = None
        autodiscover()

    # -- control -------------------------------------------------------------------------
    def run_until_idle(self) -> int:
        """Deliver every message claimable now (not retries that are not due); return how many
        were delivered. Used by ``run_relay --once``."""
        delivered_before = self.stats.delivered
        errors_before = self.stats.db_errors
        try:
            while not self.stopping.is_set():
                self._guarded(self.step)
                if self._claimed_last == 0 or self.stats.db_errors > errors_before:
                    break
        finally:
            self.shutdown()
        return self.stats.delivered - delivered_before

    def shutdown(self) -> None:
        try:
            self._end_claiming_ahead()
        finally:
            self.heartbeat.stop()
            self.transports.close()
            self._close()
        logger.info(
            "relay stopped relay=%s delivered=%d retried=%d dead_lettered=%d",
            self.instance_id,
            self.stats.delivered,
            self.stats.retried,
            self.stats.dead_lettered,
        )

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> float:
        """Claim and deliver one batch; return how long to sleep before the next round."""
        self._ensure_session()
        connection = connections[self.using]
        self._ahead_bytes = None
        ahead = self._take_ahead()
        if ahead is None:
            limit = self.claim_limit()
            claimed, _ = self._claim(limit, self.batch_bytes, self._since)
        else:
            claimed, limit = ahead
        live, dead = claimed.live, claimed.dead
        self._claimed_last = len(live) + len(dead)
        if claimed.at_us is not None:
            self._since = claimed.at_us
        in_hand = sum(m.size for m in live)
        if self._claimed_last:
            self._message_bytes = (in_hand + sum(m.size for m in dead)) / self._claimed_last
        self._note_dead(dead)
        if self._claimed_last:
            self.stats.batches += 1
            self.stats.claimed += len(live)
            # A full claim is a backlog: claim the next batch ahead, within what the byte cap
            # leaves of the batch in hand (the two batches share it).
            full = self._claimed_last >= max(limit, CLAIM_AHEAD_MIN)
            # Two full claims in a row: a steady stream delivered a batch at a time (1,000
            # fires a second, one batch each) has nothing to claim ahead.
            backlog, self._was_full = full and self._was_full, full
            self._ahead_bytes = (
                self.batch_bytes - in_hand if backlog and in_hand <= self.batch_bytes // 2 else None
            )
            self.deliver(live)
            return 0.0
        self._was_full = False
        self._close_ahead_session()  # idle: no backlog to claim ahead of
        with connection.cursor() as cursor:
            until = seconds_until_claimable(cursor, self.topics, within=self.poll_interval)
        wait = self.poll_interval if until is None else max(0.0, until)
        return min(wait, self.poll_interval)

    def _note_dead(self, dead: list[Message]) -> None:
        """Log and count the messages a claim dead-lettered."""
        for message in dead:
            self.stats.dead_lettered += 1
            logger.error(
                "dead-lettered id=%s topic=%s type=%s %s",
                message.id,
                message.topic,
                message.event_type,
                # A claimed payload is never empty text: size 0 is a message whose event
                # (holding its payload, stored once) is gone.
                "with no payload to deliver: its event was deleted from event_store_t"
                if message.size == 0
                else f"after {message.attempt} attempts with no recorded outcome (relays "
                "died or hung while delivering it)",
                extra=self._log_context(message),
            )
        if dead and self.metrics is not None:
            tally = Counter((self._transport_label(m), DEAD_LETTER) for m in dead)
            self.metrics.settled(tally, ())

    # -- claiming ahead --------------------------------------------------------------------
    def _claim_ahead(self, max_bytes: int) -> None:
        """Start claiming the next batch on the claim-ahead thread (its own session)."""
        if self._ahead_pool is None:
            self._ahead_pool = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"dsched-claim-{self.instance_id}"
            )
        limit = self.claim_limit()
        self._ahead_session = True
        self._ahead = (
            self._ahead_pool.submit(self._claim_here, limit, max_bytes, self._since),
            limit,
        )

    def _claim(self, limit: int, max_bytes: int, since: int | None) -> tuple[Claimed, float]:
        """Claim a batch on this thread's session (Django's connections are per thread),
        noting how long the claim took; the batch, and when its claim began."""
        began = time.monotonic()
        with binding.cursor(connections[self.using]) as cursor:
            claimed = claim_batch(cursor, self.claimer, limit, max_bytes, since_us=since)
        self._claim_seconds = time.monotonic() - began
        return claimed, began

    def _claim_here(self, limit: int, max_bytes: int, since: int | None) -> tuple[Claimed, float]:
        # On the claim-ahead thread.
        try:
            return self._claim(limit, max_bytes, since)
        except BaseException:
            connections[self.using].close()  # a new session for the next claim ahead
            raise

    def _take_ahead(self) -> tuple[Claimed, int] | None:
        """The batch claimed ahead (waiting for its claim to end), if any, less any claim of
        it that expired before it could be sent."""
        if self._ahead is None:
            return None
        (future, limit), self._ahead = self._ahead, None
        try:
            claimed, began = future.result(timeout=self.claimer.visibility_timeout)
        except (Error, FutureTimeout) as exc:
            # Nothing was claimed, or its claims expire and any relay delivers them: claim on
            # this thread instead.
            logger.warning(
                "claiming ahead failed (%s); claiming again relay=%s",
                first_line(exc) if isinstance(exc, Error) else "no answer in time",
                self.instance_id,
            )
            return None
        if claimed.live and time.monotonic() - began > self.heartbeat.interval:
            # Held past a renewal without one (the batch before it ran long, the database
            # was away, this process was frozen): its claims may have expired and been taken
            # over. Renewed, fenced, before anything of it is sent; what was lost is not.
            held = self._renew(claimed.live)
            claimed = Claimed(
                [m for m in claimed.live if m.id in held], claimed.dead, claimed.at_us
            )
        return claimed, limit

    def _close_ahead_session(self) -> None:
        """Close the claim-ahead thread's session (a relay with no backlog needs none)."""
        if self._ahead_pool is not None and self._ahead_session and self._ahead is None:
            self._ahead_session = False
            using = self.using
            self._ahead_pool.submit(lambda: connections[using].close())

    def _end_claiming_ahead(self) -> None:
        """Stopping: give back a batch claimed ahead, close the thread's session."""
        try:
            ahead = self._take_ahead()
            if ahead is not None:
                self._note_dead(ahead[0].dead)
                if ahead[0].live:
                    self._release(ahead[0].live)
        except Error as exc:  # its claims expire after the visibility timeout
            logger.warning(
                "could not give back the batch claimed ahead (%s) relay=%s",
                first_line(exc),
                self.instance_id,
            )
        finally:
            if self._ahead_pool is not None:
                self._close_ahead_session()
                self._ahead_pool.shutdown(wait=False)
                self._ahead_pool = None

    def claim_limit(self) -> int:
        """Rows to ask of the next claim: the batch size, or fewer when the last claim's
        messages were so large that the byte cap would keep only some of them, or when the
        last batch was sent so slowly that a whole batch would take over ``BATCH_SECONDS``."""
        limit = self.batch_size
        if self._message_bytes > 0:
            fits = self.batch_bytes / self._message_bytes
            limit = min(limit, int(fits * CLAIM_SPARE) + 1)
        if self._send_seconds > 0:
            limit = min(limit, int(BATCH_SECONDS / self._send_seconds) + 1)
        return max(1, limit)

    def deliver(self, messages: Sequence[Message]) -> None:
        """Send claimed messages in order, renewing the claim as needed, then record outcomes."""
        messages = list(messages)
        self.heartbeat.hold(messages)  # renewed from its own thread while the batch runs
        try:
            self._deliver(messages)
        finally:
            self.heartbeat.running((), None)
            self.heartbeat.drop(m.id for m in messages)

    def _deliver(self, messages: list[Message]) -> None:
        renew_at = time.monotonic() + self.claimer.visibility_timeout * RENEW_AFTER
        outcomes: list[DeliveryOutcome] = []
        lost: set[uuid.UUID] = set()  # claims another relay took over while this batch ran
        sent = 0  # messages[:sent] were attempted
        sending, attempted = 0.0, 0  # seconds in the transports' sends, messages they sent
        for chunk, send, hands_off in self._chunks(messages):
            if self.stopping.is_set():
                break
            # (Not knowing the pace yet, a relay claims ahead only beside the settle, below.)
            left = (len(messages) - sent) * self._send_seconds
            if (
                self._ahead_bytes is not None
                and self._send_seconds > 0
                and left <= AHEAD_LEAD * self._claim_seconds
            ):
                self._claim_ahead(self._ahead_bytes)
                self._ahead_bytes = None
            if self.heartbeat.lost_any:
                lost |= self.heartbeat.lost()
            if time.monotonic() >= renew_at:
                self._settle(outcomes)
                outcomes = []
                unsent = [m for m in messages[sent:] if m.id not in lost]
                lost |= {m.id for m in unsent} - self._renew(unsent)
                renew_at = time.monotonic() + self.claimer.visibility_timeout * RENEW_AFTER
            sent += len(chunk)
            if lost:
                chunk = [m for m in chunk if m.id not in lost]
                if not chunk:
                    continue
            if self.metrics is not None:
                label = self._transport_label(chunk[0])
                self.metrics.attempted(label, len(chunk))
                self._labels.update((m.id, label) for m in chunk)
            started = time.monotonic()
            if not hands_off:  # the heartbeat marks a long run RUNNING while it runs
                self.heartbeat.running([m.id for m in chunk], started)
            try:
                results = send(chunk)
            except Exception as exc:  # a transport bug must not kill the relay
                logger.exception("transport failed unexpectedly relay=%s", self.instance_id)
                results = [exc] * len(chunk)
            ended = time.monotonic()
            sending += ended - started
            attempted += len(chunk)
            self.heartbeat.running((), None)
            self.tick()
            began = None if hands_off else started
            for m, result in zip(chunk, results, strict=True):
                outcomes.append(
                    DeliveryOutcome(m, started=began, ended=ended)
                    if result is None
                    else self._outcome(m, result, began, ended)
                )
        if attempted:
            self._send_seconds = sending / attempted
        if self._ahead_bytes is not None and not self.stopping.is_set():
            self._claim_ahead(self._ahead_bytes)  # alongside the settle, at the latest
        self._ahead_bytes = None
        self._settle(outcomes)
        unsent = [m for m in messages[sent:] if m.id not in lost]
        if unsent:
            self._release(unsent)

    def _transport_label(self, message: Message) -> str:
        """The metrics' ``transport`` label of a message: its transport's alias."""
        try:
            transport = type(self.transports.for_message(message))
        except Exception:
            return "unconfigured"
        return transport.alias or transport.__name__

    def _log_context(self, message: Message) -> dict[str, Any]:
        """The fields a JSON log line about a delivery carries (django_dsched.runtime.logs)."""
        return {
            "instance": self.instance_id,
            "message_id": str(message.id),
            "topic": message.topic,
            "attempt": message.attempt,
            "schedule": message.payload.get("subject"),
            "slot": message.payload.get("scheduledtime"),
        }

    # -- delivery ------------------------------------------------------------------------
    def _chunks(
        self, messages: list[Message]
    ) -> list[
        tuple[list[Message], Callable[[Sequence[Message]], list[BaseException | None]], bool]
    ]:
        """Runs of messages that share a transport, cut to the transport's batch size, each
        with whether the transport hands the work off to workers that report its phases."""
        chunks = []
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
                transport: Transport | None = self.transports.for_message(run[0])
            except Exception as exc:
                transport, error = None, exc
            if transport is None:
                chunks.append((run, self._failing(error), False))
                continue
            size = max(1, transport.batch_size)
            for start in range(0, len(run), size):
                chunks.append((run[start : start + size], transport.send_many, transport.hands_off))
        return chunks

    @staticmethod
    def _failing(
        error: BaseException,
    ) -> Callable[[Sequence[Message]], list[BaseException | None]]:
        def send(messages: Sequence[Message]) -> list[BaseException | None]:
            return [error] * len(messages)

        return send

    def _outcome(
        self,
        message: Message,
        exc: BaseException | None,
        started: float | None = None,
        ended: float | None = None,
    ) -> DeliveryOutcome:
        if exc is None:
            return DeliveryOutcome(message, started=started, ended=ended)
        error = describe(exc)
        delay = self._retry_delay(message)
        asked = exc.retry_after if isinstance(exc, DeliveryError) else None
        if asked is not None:  # the destination's Retry-After: at least that, within RETRY_MAX
            delay = min(self.retry_max, max(delay, asked))
        return DeliveryOutcome(
            message,
            error=error,
            permanent=isinstance(exc, PermanentDeliveryError),
            delay=delay,
            started=started,
            ended=ended,
        )

    def _retry_delay(self, message: Message) -> float:
        return retry_delay(message.attempt, self.retry_base, self.retry_max)

    def _settle(self, outcomes: list[DeliveryOutcome]) -> None:
        if not outcomes:
            return
        self.heartbeat.drop(o.message.id for o in outcomes)
        labels, self._labels = self._labels, {}
        with self.heartbeat.writing, binding.cursor(connections[self.using]) as cursor:
            recorded = record(self.using, cursor, self.claimer, outcomes, self._retry_delay)
        self._report(recorded, labels)

    def _report(self, recorded: Recorded, labels: dict[uuid.UUID, str]) -> None:
        """Stats, logs and metrics of recorded outcomes."""
        self._report_refusals(recorded.refused, recorded.unrecorded)
        by_id = {s.id: s for s in recorded.settled}
        delivered = 0
        tally: Counter[tuple[str, str]] | None = Counter() if self.metrics is not None else None
        latencies: list[float] = []
        debug = logger.isEnabledFor(logging.DEBUG)
        for outcome in [*recorded.outcomes, *recorded.unrecorded.values()]:
            message = outcome.message
            result = by_id.get(message.id)
            if tally is not None:
                self._measure(message, outcome, result, tally, latencies, labels)
            if message.id in recorded.unrecorded:
                continue  # reported above
            if result is None:
                self.stats.lost_claims += 1
                logger.warning(
                    "outcome of id=%s topic=%s not recorded: its claim expired and another "
                    "relay took it over relay=%s",
                    message.id,
                    message.topic,
                    self.instance_id,
                    extra=self._log_context(message),
                )
            elif outcome.delivered:
                delivered += 1
                if debug:
                    logger.debug(
                        "delivered id=%s topic=%s type=%s attempt=%d",
                        message.id,
                        message.topic,
                        message.event_type,
                        message.attempt,
                        extra=self._log_context(message),
                    )
            elif result.status == DeliveryStatus.DELIVERY_FAILED:
                self.stats.dead_lettered += 1
                logger.error(
                    "dead-lettered id=%s topic=%s type=%s after %d attempt(s)%s: %s",
                    message.id,
                    message.topic,
                    message.event_type,
                    message.attempt,
                    " (permanent failure)" if outcome.permanent else "",
                    outcome.error,
                    extra=self._log_context(message),
                )
            else:
                self.stats.retried += 1
                logger.warning(
                    "delivery failed id=%s topic=%s type=%s attempt=%d/%d; retry in %.1fs: %s",
                    message.id,
                    message.topic,
                    message.event_type,
                    message.attempt,
                    self.claimer.max_attempts,
                    outcome.delay,
                    outcome.error,
                    extra=self._log_context(message),
                )
        if tally is not None and self.metrics is not None:
            self.metrics.settled(tally, latencies)
        if delivered:
            self.stats.delivered += delivered
            logger.info(
                "delivered %d message(s) relay=%s",
                delivered,
                self.instance_id,
                extra={"instance": self.instance_id},
            )

    def _report_refusals(
        self,
        refused: dict[uuid.UUID, DeliveryOutcome],
        unrecorded: dict[uuid.UUID, DeliveryOutcome],
    ) -> None:
        """Log the outcomes the database refused to store (``outbox.outcomes``)."""
        for outcome in refused.values():
            self.stats.refused += 1
            logger.error(
                "the database refused the outcome of id=%s topic=%s (%s); recorded as a "
                "failed attempt instead relay=%s",
                outcome.message.id,
                outcome.message.topic,
                "delivered" if outcome.delivered else f"failed: {outcome.error}",
                self.instance_id,
                extra=self._log_context(outcome.message),
            )
        for outcome in unrecorded.values():
            self.stats.unrecorded += 1
            logger.error(
                "the database refused the outcome of id=%s topic=%s (%s) and the failed "
                "attempt in its place: nothing recorded; its claim expires and it is sent "
                "again (dead-lettered once claimed %d times) relay=%s",
                outcome.message.id,
                outcome.message.topic,
                "delivered" if outcome.delivered else f"failed: {outcome.error}",
                self.claimer.max_attempts,
                self.instance_id,
                extra=self._log_context(outcome.message),
            )

    def _measure(
        self,
        message: Message,
        outcome: DeliveryOutcome,
        result: Settled | None,
        tally: Counter[tuple[str, str]],
        latencies: list[float],
        labels: dict[uuid.UUID, str],
    ) -> None:
        """Count one settled outcome for the metrics (and its latency, if delivered)."""
        label = labels.get(message.id) or self._transport_label(message)
        if result is None:
            tally[label, LOST] += 1
        elif outcome.delivered:
            tally[label, DELIVERED] += 1
            slot = slot_of(message.payload)
            if slot is not None and result.delivered_ts is not None:
                latencies.append((result.delivered_ts - slot).total_seconds())
        elif result.status == DeliveryStatus.DELIVERY_FAILED:
            tally[label, DEAD_LETTER] += 1
        else:
            tally[label, RETRY] += 1

    def _renew(self, messages: list[Message]) -> set[uuid.UUID]:
        with self.heartbeat.writing, connections[self.using].cursor() as cursor:
            held = extend(cursor, self.claimer, messages)
        lost = len(messages) - len(held)
        if lost:
            self.stats.lost_claims += lost
            logger.warning(
                "%d claim(s) expired before renewal and were taken over relay=%s",
                lost,
                self.instance_id,
            )
        return held

    def _release(self, messages: list[Message]) -> None:
        self.heartbeat.drop(m.id for m in messages)
        with self.heartbeat.writing, connections[self.using].cursor() as cursor:
            released = release(cursor, self.claimer, messages)
        self.stats.released += released
        logger.info(
            "stopping: gave back %d claimed message(s) relay=%s", released, self.instance_id
        )
