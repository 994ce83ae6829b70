"""The ``run_relay`` loop: claim pending outbox messages, deliver them, record the outcome.

Any number of relays run at once, anywhere. A relay claims messages (higher priority first;
within a priority, what became claimable since its previous claim first, then the backlog,
host by host in turn; at most ``RELAY_BATCH_SIZE`` messages and ``RELAY_BATCH_BYTES`` of
payload a claim) with ``SKIP LOCKED`` and a visibility timeout (:mod:`.claims`), and sends
them concurrently, each destination (a route, for one host) in a lane of its own within its
limits, on worker threads (:mod:`.dispatch`), with a circuit breaker per destination
(:mod:`.breaker`). It claims again as room frees, on claim threads of its own, two claims at
once at most, and two only while it is behind (:mod:`.claiming`), and its own thread
records the outcomes the send threads hand back, many in one statement: DELIVERED, a retry
after a jittered exponential delay, or DELIVERY_FAILED (a dead letter) once the attempts
are used up. If the database refuses that statement for one row's values, the outcomes are
recorded one by one, a refused one as a failed attempt (:mod:`.outcomes`). Outcomes,
renewals and give-backs all go through the relay's one session, fenced on the claim.

Delivery is at least once: a relay that dies after sending and before recording leaves the
message claimed until its visibility timeout (the claim heartbeat, :mod:`.heartbeat`, keeps
every claim the relay holds alive while it lives), then another relay sends it again, with
the same id (the idempotency key consumers dedupe on).

An idle relay sleeps until the next retry is due or the poll interval passes; the fire
statement's NOTIFY on ``dsched_outbox`` wakes it at once, as does a send thread with outcomes
to record.

Its parts: :mod:`.pace` (how many rows a claim asks for), :mod:`.dispatch` and :mod:`.lanes`
(the sends), :mod:`.breaker` and :mod:`.circuits` (destinations' health), :mod:`.retries`
(what a failed send becomes), :mod:`.reports` (stats, log lines, metrics), :mod:`.tally`
(the metrics' outcome labels).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import DatabaseError, Error, connections

from django_dsched.conf import app_settings
from django_dsched.outbox import claiming
from django_dsched.outbox.breaker import BreakerRules
from django_dsched.outbox.circuits import Circuits
from django_dsched.outbox.claiming import Claiming, Taken
from django_dsched.outbox.claims import claim_batch, seconds_until_claimable
from django_dsched.outbox.dispatch import SETTLE_WAIT, Deferred, Dispatcher, Limits
from django_dsched.outbox.handlers import autodiscover
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.holding import defer, extend, release
from django_dsched.outbox.messages import Claimed, Claimer, Message
from django_dsched.outbox.outcomes import record
from django_dsched.outbox.pace import Pace
from django_dsched.outbox.quarantine import Quarantine
from django_dsched.outbox.refused import claim_narrowed
from django_dsched.outbox.reports import RelayStats, Reports
from django_dsched.outbox.retries import Retries
from django_dsched.outbox.transports import Transports
from django_dsched.runtime import binding
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import DatabaseLoop, first_line
from django_dsched.runtime.one_server import OtherServer
from django_dsched.runtime.refusals import refusal, refused

if TYPE_CHECKING:
    from django_dsched.metrics.relay import RelayMetrics  # needs prometheus_client

logger = get_logger(__name__)

# A relay holds (claimed or being claimed, not recorded) at most this many batches of
# messages, and of bytes: it claims the next batch while it sends the one before.
HELD_BATCHES = 3


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
        concurrency: int | None = None,
        host_concurrency: int | None = None,
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
            pin=self.pin,
        )
        self.stats = RelayStats()
        self.reports = Reports(
            self.instance_id, self.claimer.max_attempts, self.transports, self.stats, metrics
        )
        self.limits = Limits(
            sends=concurrency or int(app_settings.RELAY_CONCURRENCY),
            per_host=host_concurrency or int(app_settings.RELAY_HOST_CONCURRENCY),
        )
        self.dispatch = Dispatcher(
            self.instance_id,
            self.transports,
            self.limits,
            self.heartbeat,
            self.retries,
            BreakerRules(
                failures=int(app_settings.RELAY_CIRCUIT_FAILURES),
                seconds=float(app_settings.RELAY_CIRCUIT_SECONDS),
                max_seconds=float(app_settings.RELAY_RETRY_MAX),
            ),
            self.waker.wake,
            self.reports.attempted,
            self.stopping,
        )
        self.circuits = Circuits(self.instance_id, metrics)
        self.claiming = Claiming(self.instance_id, self.using, self._claim_here, self.waker.wake)
        self._claimed_last = 0
        self._claim_full = True  # the last claim came back full (or none yet): claim again
        # The last claim took a message that had waited longer than claiming.BEHIND_AFTER
        # (or none was made yet): a second claim may run beside the one in flight.
        self._behind = True
        self._turn = 0  # the hosts' turn in a backlog, moved by one a claim (claims.py)
        self._claim_at = 0.0  # claim again by then (monotonic): a retry's backoff, a poll
        self._notifications = -1  # the waker's count at the last claim
        self._held_back: list[str] = []  # what the last claim passed over
        self.pace = Pace()
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
        self.dispatch.reopen()
        self._claim_full = True  # look at once
        try:
            while not self.stopping.is_set():
                wait = self._guarded(self.step)
                if self.stats.db_errors > errors_before or self.idle():
                    break
                if wait > 0:
                    self.waker.wait(wait)
        finally:
            self.shutdown()
        return self.stats.delivered - delivered_before

    def run(self, *, max_iterations: int | None = None) -> None:
        self.dispatch.reopen()
        self._claim_full = True  # look at once
        super().run(max_iterations=max_iterations)

    def idle(self) -> bool:
        """Whether the last claim found nothing, none runs and nothing is held."""
        return self._claimed_last == 0 and not self.dispatch.held and not self.claiming.running

    def shutdown(self) -> None:
        try:
            self._stop_sending()
        finally:
            self.claiming.close()
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

    def _stop_sending(self) -> None:
        """Give the queued messages back (and the claims in flight's), wait for the sends
        under way (at most a visibility timeout: their claims have expired by then), give
        back what they left of their runs and record the rest."""
        queued = self.dispatch.close()
        try:
            queued += self._claims_in_flight()
            if queued:
                self._release(queued)
            self.dispatch.wait_sends(self.claimer.visibility_timeout)
            unsent = self.dispatch.close()  # the rest of the runs under way, not sent
            if unsent:
                self._release(unsent)
            self.write_back(force=True)
            self.circuits.forget(connections[self.using])
        except Error as exc:  # the claims expire after the visibility timeout
            logger.warning(
                "stopping: could not record or give back what this relay holds (%s) relay=%s",
                first_line(exc),
                self.instance_id,
            )

    def _claims_in_flight(self) -> list[Message]:
        """Stopping: the messages of the claims in flight, once they end (waiting a visibility
        timeout at most, for all of them; none of one that failed or still runs then: what
        it claims expires a visibility timeout after its statement)."""
        self.claiming.wait(self.claimer.visibility_timeout)
        live: list[Message] = []
        while True:
            try:
                taken = self.claiming.take()
            except Error as exc:
                logger.warning(
                    "stopping: a claim in flight failed (%s) relay=%s",
                    first_line(exc),
                    self.instance_id,
                )
                continue
            if taken is None:
                return live
            self.reports.dead_at_claim(taken.claimed.dead, taken.claimed.why)
            live += taken.claimed.live

    def on_new_session(self) -> None:
        """A new session (after an outage, maybe on another server: a failover): renew what
        the relay holds on it before sending more, so a claim the new server does not know of
        (its primary's last commits lost with it) is reported lost and not sent."""
        self.heartbeat.beat()

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> float:
        """Record what the sends handed back, claim more if there is room; return how long
        to sleep (the send threads and NOTIFY wake the relay sooner)."""
        self._ensure_session()
        self._take_claim()
        self.write_back()
        self.circuits.write(self.dispatch, connections[self.using])
        if self.reports.metrics is not None:
            self.reports.metrics.holding(len(self.dispatch.jobs), len(self.dispatch.held))
        if self.stopping.is_set():
            return 0.0
        if (
            self.claiming.free(self.pin.generation)
            and self._claim_wanted()
            and not self.split_brain()
        ):
            self._claim_more()
        if self.idle():
            self.claiming.idle()
        return self._sleep()

    def drain(self, timeout: float = 30.0) -> None:
        """Wait for the claims in flight, and for everything held to be sent, and record it
        (tests)."""
        deadline = time.monotonic() + timeout
        self._take_claim(wait=timeout)
        while self.dispatch.held and time.monotonic() < deadline:
            self.dispatch.wait_sends(max(0.0, deadline - time.monotonic()))
            self.write_back(force=True)
            if self.dispatch.held and not self.dispatch.busy():
                self.write_back(force=True)
                time.sleep(0.01)

    def _sleep(self) -> float:
        # Until the sleep is known, a send handing outcomes wakes the relay (one handed
        # while it is reckoned would otherwise wait for the sleep's end).
        self.dispatch.wakes_at = math.inf
        wait = self.poll_interval
        settle = self.dispatch.settle_due(SETTLE_WAIT)
        if settle is not None:
            wait = min(wait, settle)
        if (
            not self._claim_full
            and not self.claiming.running
            and self._room() is not None
            and not self.split_brain()
        ):
            # (a claim in flight wakes the relay as it ends, and so does a send as its
            # outcome is due to be recorded, or its claims are lost: either makes room)
            wait = min(wait, max(0.0, self._claim_at - time.monotonic()))
        if keeping_up := self._keeping_up():
            # (a claim in flight that runs on leaves the relay behind: look again then)
            wait = min(wait, keeping_up)
        self.dispatch.wakes_at = time.monotonic() + wait
        return wait

    # -- claiming ------------------------------------------------------------------------
    def claim_limit(self) -> int:
        """Rows to ask of the next claim (:meth:`.pace.Pace.claim_limit`)."""
        return self.pace.claim_limit(self.batch_size, self.batch_bytes)

    def _claim_wanted(self) -> bool:
        """Whether to claim now: the last claim was full, or a NOTIFY came since the last
        claim began, or a destination it passed over has room again; with no claim in
        flight, also when the last claim found something and nothing is held now, or a retry
        (or the poll) is due (the claim in flight looks for those). A second claim beside
        the one in flight only while the relay is behind, or that claim has run longer than
        :data:`.claiming.BEHIND_AFTER` (a slow claim leaves the relay behind)."""
        if self._keeping_up():
            return False
        if self._claim_full or self.waker.notifications != self._notifications:
            return True
        if bool(self._held_back) and self.dispatch.held_back() != self._held_back:
            return True
        if self.claiming.running:
            return False
        return bool(self._claimed_last and not self.dispatch.held) or (
            time.monotonic() >= self._claim_at
        )

    def _keeping_up(self) -> float:
        """While a claim runs and the relay keeps up (not behind): the seconds until that
        claim has run long enough to leave it behind (:data:`.claiming.BEHIND_AFTER`); else
        0, and a second claim may start beside the one in flight."""
        if not self.claiming.running or self._behind:
            return 0.0
        return max(0.0, claiming.BEHIND_AFTER - self.claiming.running_for())

    def _claim_more(self) -> None:
        """Claim what there is room for (counting what the claims in flight may bring): on a
        claim thread while the relay holds messages or a claim runs (it sends and records
        meanwhile), else at once on its own session."""
        room = self._room()
        if room is None:
            return
        held, limit, max_bytes = room
        self._notifications = self.waker.notifications
        self._held_back = self.dispatch.held_back()
        self._turn += 1  # the hosts' turn in a backlog moves by one a claim
        if held:
            self.claiming.start(
                limit, max_bytes, self._since, self._held_back, self._turn, self.pin.generation
            )
        else:
            began, generation = time.monotonic(), self.pin.generation
            claimed = self._claim(limit, max_bytes, self._since, rotate=self._turn)
            self._took(Taken(claimed, limit, began, generation))

    def _room(self) -> tuple[int, int, int] | None:
        """(messages held and asked for, rows and bytes the next claim may ask for), or None
        when the relay holds messages and has no batch's room (rows or bytes) left: claims
        would come back small. What the claims in flight asked for counts as held."""
        asked, asked_bytes = self.claiming.asked()
        held = len(self.dispatch.held) + asked
        room = HELD_BATCHES * self.batch_size - held
        bytes_room = HELD_BATCHES * self.batch_bytes - self.dispatch.held_bytes - asked_bytes
        if held and (room < self.batch_size or bytes_room < self.batch_bytes):
            return None
        return held, min(self.claim_limit(), room), min(self.batch_bytes, bytes_room)

    def _take_claim(self, wait: float = 0.0) -> None:
        """Take the claims the claim threads ended, if any (waiting at most ``wait`` s for
        each)."""
        while (taken := self.claiming.take(wait)) is not None:
            self._took(taken)

    def _took(self, taken: Taken) -> None:
        """Hand a claim's messages to the sends (renewed first, on the relay's session, if the
        claim began longer than a heartbeat interval ago, or before the relay's session was
        lost or moved: taken over meanwhile, or claimed on another server, a message is not
        sent)."""
        claimed, limit = taken.claimed, taken.limit
        live, dead = claimed.live, claimed.dead
        dropped = 0
        if live and self.split_brain():
            # Claimed before the split was seen, on either side: sent by no one now, each is
            # claimed again once its claim expires (the visibility timeout), where it is due.
            logger.warning(
                "not sending %d message(s) claimed as a split brain was seen relay=%s",
                len(live),
                self.instance_id,
            )
            live, dropped = [], len(live)
        old = time.monotonic() - taken.began > self.heartbeat.interval
        if live and (old or self.pin.generation != taken.generation):
            with self.heartbeat.writing:
                kept, _ = extend(self.using, self.claimer, live)
            live = [m for m in live if m.id in kept]
        # What a split kept from the sends does not count as found (the relay is idle then).
        self._claimed_last = len(claimed.live) + len(dead) - dropped
        self._claim_full = self._claimed_last >= limit
        self._behind = claimed.waited > claiming.BEHIND_AFTER
        if claimed.at_us is not None:  # the later claim's, whichever ended first
            self._since = max(self._since or 0, claimed.at_us)
        if self._claimed_last:
            size = sum(m.size for m in claimed.live) + sum(m.size for m in dead)
            self.pace.message_bytes = size / (len(claimed.live) + len(dead))
            self.stats.batches += 1
            self.stats.claimed += len(live)
        self.reports.dead_at_claim(dead, claimed.why)
        self.dispatch.add(live)
        if not self._claim_full:
            self._claim_at = time.monotonic() + self._until_claimable()

    def _until_claimable(self) -> float:
        """Seconds until a message not claimed yet becomes claimable (a retry's backoff, a
        claim that expires), at most the poll interval."""
        with connections[self.using].cursor() as cursor:
            until = seconds_until_claimable(
                cursor,
                self.topics,
                within=self.poll_interval,
                skip=self.quarantine.skipped(),
                held_back=self._held_back,
            )
        return self.poll_interval if until is None else min(self.poll_interval, max(0.0, until))

    def _claim_here(
        self, limit: int, max_bytes: int, since: int | None, held_back: list[str], rotate: int
    ) -> Claimed:
        """Claim a batch on the calling thread's session (a claim thread's), if it is on
        the relay's server (runtime/one_server.py) and no split brain is seen: else claim
        nothing this time."""
        if self.split_brain():
            return Claimed([], [])
        try:
            self.pin.check(connections[self.using])
        except OtherServer as exc:
            logger.warning("claimed nothing: %s relay=%s", exc, self.instance_id)
            return Claimed([], [])
        return self._claim(limit, max_bytes, since, held_back, rotate)

    def _claim(
        self,
        limit: int,
        max_bytes: int,
        since: int | None,
        held_back: list[str] | None = None,
        rotate: int = 0,
    ) -> Claimed:
        """Claim a batch on the calling thread's session (``rotate``: the hosts' turn in a
        backlog, :func:`.claims.claim_batch`)."""
        held_back = self._held_back if held_back is None else held_back
        skip = self.quarantine.skipped()
        try:
            with binding.cursor(connections[self.using]) as cursor:
                return claim_batch(
                    cursor,
                    self.claimer,
                    limit,
                    max_bytes,
                    since_us=since,
                    skip=skip,
                    held_back=held_back,
                    rotate=rotate,
                )
        except DatabaseError as exc:
            if not refused(exc) or connections[self.using].in_atomic_block:
                raise
            return self._claim_narrowed(exc, limit, max_bytes, since, skip, held_back, rotate)

    def _claim_narrowed(
        self,
        exc: DatabaseError,
        limit: int,
        max_bytes: int,
        since: int | None,
        skip: list[uuid.UUID],
        held_back: list[str],
        rotate: int,
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
            self.using, self.claimer, limit, max_bytes, since, skip, held_back, rotate
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

    # -- recording -----------------------------------------------------------------------
    def write_back(self, *, force: bool = False) -> None:
        """Record the outcomes the send threads handed back, give back the messages of open
        circuits and those over a lane's room, when due (``force``: now)."""
        self.dispatch.trim()
        due = self.dispatch.settle_due(SETTLE_WAIT)
        if due is None or (due > 0 and not force):
            return
        handed = self.dispatch.take()
        if handed.deferred:
            self._defer(handed.deferred)
        if handed.released:
            self._release(handed.released, why="held back")
        if handed.done:
            self.heartbeat.drop(o.message.id for o in handed.done)
            labels = self.reports.take_labels()
            with self.heartbeat.writing, binding.cursor(connections[self.using]) as cursor:
                recorded = record(
                    self.using,
                    cursor,
                    self.claimer,
                    handed.done,
                    self.retries.delay,
                    times=self.reports.metrics is not None,  # the latencies
                )
            self.reports.recorded(recorded, labels)

    def _defer(self, deferred: list[Deferred]) -> None:
        self.heartbeat.drop(d.message.id for d in deferred)
        groups: dict[tuple[float, str], list[Message]] = {}
        for item in deferred:
            groups.setdefault((round(item.seconds, 1), item.note), []).append(item.message)
        for (seconds, note), messages in groups.items():
            with self.heartbeat.writing:
                held, refused_ = defer(self.using, self.claimer, messages, seconds, note)
            self.stats.deferred += len(held)
            self._refused_give_back(refused_)

    def _release(self, messages: list[Message], *, why: str = "stopping") -> None:
        self.heartbeat.drop(m.id for m in messages)
        with self.heartbeat.writing:
            released, refused_ = release(self.using, self.claimer, messages)
        self.stats.released += len(released)
        logger.info(
            "%s: gave back %d claimed message(s) relay=%s", why, len(released), self.instance_id
        )
        self._refused_give_back(refused_)

    def _refused_give_back(self, refused_: list[tuple[Message, str]]) -> None:
        for message, error in refused_:
            logger.error(
                "could not give back message %s: the database refused it (%s); its claim "
                "expires after the visibility timeout relay=%s",
                message.id,
                error,
                self.instance_id,
                extra={"message_id": str(message.id)},
            )
