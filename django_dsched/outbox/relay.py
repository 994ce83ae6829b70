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

Its parts: :mod:`.pace` (how many rows a claim asks for), :mod:`.ahead` (claiming the next
batch while this one is sent), :mod:`.chunks` (a batch cut by transport), :mod:`.retries`
(what a failed send becomes), :mod:`.reports` (stats, log lines, metrics), :mod:`.tally` (the
metrics' outcome labels).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from django_dsched.conf import app_settings
from django_dsched.outbox.ahead import ClaimAhead
from django_dsched.outbox.chunks import chunks
from django_dsched.outbox.claims import (
    Claimed,
    Claimer,
    DeliveryOutcome,
    Message,
    claim_batch,
    seconds_until_claimable,
)
from django_dsched.outbox.handlers import autodiscover
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.holding import extend, release
from django_dsched.outbox.outcomes import record
from django_dsched.outbox.pace import Pace
from django_dsched.outbox.quarantine import Quarantine
from django_dsched.outbox.refused import claim_narrowed
from django_dsched.outbox.reports import RelayStats, Reports
from django_dsched.outbox.retries import Retries
from django_dsched.outbox.transports import Transports
from django_dsched.runtime import binding
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop
from django_dsched.runtime.refusals import refusal, refused

if TYPE_CHECKING:
    from django_dsched.metrics.relay import RelayMetrics  # needs prometheus_client

logger = get_logger(__name__)

# Renew claims once this share of the visibility timeout has passed since the last renewal.
RENEW_AFTER = 0.5


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
        self.retries = Retries(
            float(app_settings.RELAY_RETRY_BASE), float(app_settings.RELAY_RETRY_MAX)
        )
        self.transports = transports if transports is not None else Transports()
        interval = app_settings.RELAY_HEARTBEAT_INTERVAL
        self.heartbeat = ClaimHeartbeat(
            self.claimer,
            float(interval) if interval else self.claimer.visibility_timeout / 4,
            self.using,
            max_run=app_settings.RELAY_MAX_RUN_SECONDS,
        )
        self.stats = RelayStats()
        self.reports = Reports(
            self.instance_id, self.claimer.max_attempts, self.transports, self.stats, metrics
        )
        self._claimed_last = 0
        self.pace = Pace()
        self.ahead = ClaimAhead(self.claimer, self.heartbeat, self.using, self._claim, self._renew)
        # The database time of the last claim that found rows: what became claimable after it
        # is on time and claimed before the backlog (claims.claim_batch).
        self._since: int | None = None
        # Messages the database refused to claim and to dead-letter: passed over for a while.
        self.quarantine = Quarantine(self.claimer.visibility_timeout)
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
            self.ahead.end(self._give_back)
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
        self.ahead.planned = None
        ahead = self.ahead.take()
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
            self.pace.message_bytes = (in_hand + sum(m.size for m in dead)) / self._claimed_last
        self.reports.dead_at_claim(dead, claimed.why)
        if self._claimed_last:
            self.stats.batches += 1
            self.stats.claimed += len(live)
            self.ahead.plan(self._claimed_last, limit, in_hand, self.batch_bytes)
            self.deliver(live)
            return 0.0
        self.ahead.idle()
        with connection.cursor() as cursor:
            until = seconds_until_claimable(
                cursor, self.topics, within=self.poll_interval, skip=self.quarantine.skipped()
            )
        wait = self.poll_interval if until is None else max(0.0, until)
        return min(wait, self.poll_interval)

    # -- claiming ------------------------------------------------------------------------
    def claim_limit(self) -> int:
        """Rows to ask of the next claim (:meth:`.pace.Pace.claim_limit`)."""
        return self.pace.claim_limit(self.batch_size, self.batch_bytes)

    def _claim(self, limit: int, max_bytes: int, since: int | None) -> tuple[Claimed, float]:
        """Claim a batch on this thread's session (Django's connections are per thread),
        noting how long the claim took; the batch, and when its claim began."""
        began = time.monotonic()
        skip = self.quarantine.skipped()
        try:
            with binding.cursor(connections[self.using]) as cursor:
                claimed = claim_batch(
                    cursor, self.claimer, limit, max_bytes, since_us=since, skip=skip
                )
        except DatabaseError as exc:
            if not refused(exc) or connections[self.using].in_atomic_block:
                raise
            claimed = self._claim_narrowed(exc, limit, max_bytes, since, skip)
        self.pace.claim_seconds = time.monotonic() - began
        return claimed, began

    def _claim_narrowed(
        self,
        exc: DatabaseError,
        limit: int,
        max_bytes: int,
        since: int | None,
        skip: list[uuid.UUID],
    ) -> Claimed:
        """The database refused the claim for a row's data: claim again, narrowed down to
        the refused messages (:mod:`.refused`), which are dead-lettered with the error, or
        passed over for a while when the database refuses that too."""
        logger.warning(
            "the database refused this relay's claim (%s): finding the message relay=%s",
            refusal(exc),
            self.instance_id,
        )
        claimed, passed_over = claim_narrowed(
            self.using, self.claimer, limit, max_bytes, since, skip
        )
        self.quarantine.add(id_ for id_, _ in passed_over)
        for id_, error in passed_over:
            logger.error(
                "passing over message %s for %.0fs: the database refused to claim it and to "
                "dead-letter it (%s) relay=%s",
                id_,
                self.quarantine.seconds,
                error,
                self.instance_id,
                extra={"message_id": str(id_)},
            )
        return claimed

    def _give_back(self, claimed: Claimed) -> None:
        """Stopping: count a batch claimed ahead's dead letters, release the rest."""
        self.reports.dead_at_claim(claimed.dead, claimed.why)
        if claimed.live:
            self._release(claimed.live)

    # -- delivery ------------------------------------------------------------------------
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
        for chunk, send, hands_off in chunks(self.transports, messages):
            if self.stopping.is_set():
                break
            # (Not knowing the pace yet, a relay claims ahead only beside the settle, below.)
            if self.ahead.due(len(messages) - sent, self.pace):
                self.ahead.start(self.claim_limit(), self._since)
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
            self.reports.attempted(chunk)
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
                    else self.retries.outcome(m, result, began, ended)
                )
        if attempted:
            self.pace.send_seconds = sending / attempted
        if self.ahead.planned is not None and not self.stopping.is_set():
            self.ahead.start(self.claim_limit(), self._since)  # alongside the settle, at the latest
        self.ahead.planned = None
        self._settle(outcomes)
        unsent = [m for m in messages[sent:] if m.id not in lost]
        if unsent:
            self._release(unsent)

    def _settle(self, outcomes: list[DeliveryOutcome]) -> None:
        if not outcomes:
            return
        self.heartbeat.drop(o.message.id for o in outcomes)
        labels = self.reports.take_labels()
        with self.heartbeat.writing, binding.cursor(connections[self.using]) as cursor:
            recorded = record(self.using, cursor, self.claimer, outcomes, self.retries.delay)
        self.reports.recorded(recorded, labels)

    def _renew(self, messages: list[Message]) -> set[uuid.UUID]:
        with self.heartbeat.writing:
            held, refused_ = extend(self.using, self.claimer, messages)
        self.heartbeat.refused_renewals(refused_)
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
        with self.heartbeat.writing:
            released, refused_ = release(self.using, self.claimer, messages)
        self.stats.released += len(released)
        logger.info(
            "stopping: gave back %d claimed message(s) relay=%s", len(released), self.instance_id
        )
        for message, error in refused_:
            logger.error(
                "could not give back message %s: the database refused it (%s); its claim "
                "expires after the visibility timeout relay=%s",
                message.id,
                error,
                self.instance_id,
                extra={"message_id": str(message.id)},
            )
