"""Concurrent delivery in one relay: the claimed messages in their destinations' lanes
(:mod:`.lanes`), sent by worker threads within the limits, their outcomes handed back.

The relay's thread claims, settles and gives back (on its own database session, which the
fence needs: :mod:`.relay`); the sends run on up to ``DSCHED_RELAY_CONCURRENCY`` daemon
threads (``Dispatcher.sends``), started as work comes and ended after
:data:`IDLE_SECONDS` without any (each closing the database connections a handler opened
on it). A thread takes the next lane in turn (round robin over the lanes with messages)
whose sends, and whose host's, are under their limits and whose circuit lets a send go
(:mod:`.breaker`), sends one chunk (the transport's ``batch_size`` messages), records the
outcome and takes the next: a slow destination's sends hold only its own lane's messages
and at most its limit of threads.

Every message the relay holds (claimed, not settled: queued, under way or sent) is held in
the claim heartbeat (:mod:`.heartbeat`) until the relay settles, defers or gives it back, so
a relay killed at any point leaves claims that expire, and another relay sends them again
with the same id. A claim the heartbeat reports lost (taken over) is not sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import connections

from django_dsched.outbox.breaker import Breaker, BreakerRules
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.lanes import Job, Lane, concurrency
from django_dsched.outbox.messages import DeliveryOutcome, Message
from django_dsched.outbox.retries import Retries
from django_dsched.outbox.transports import Transport, Transports
from django_dsched.outbox.transports.base import host_of
from django_dsched.runtime.logs import get_logger

logger = get_logger("django_dsched.outbox.relay")

# A send thread with nothing to do for this long ends (and closes its connections).
IDLE_SECONDS = 10.0
# A send thread sends a lane's messages one after the other (a transport that sends one per
# call: handlers, webhooks, RabbitMQ) for up to this many, while they go through and take no
# longer than RUN_SECONDS together, before it takes its turn again: one lock a run, not one a
# message. A slow destination's run is its one message (the rest go back to its lane, for
# its other sends).
RUN_MESSAGES = 64
RUN_SECONDS = 0.02
# The relay records the outcomes handed back once this many wait, or nothing is queued or
# under way, or the oldest has waited SETTLE_WAIT seconds.
SETTLE_MIN = 200
SETTLE_WAIT = 0.05
# Most topics a lane remembers, for the claims to pass over while it is full or open.
TOPICS_KEPT = 100


@dataclass(frozen=True)
class Limits:
    """How much one relay sends at once: ``sends`` in all, ``per_host`` for one host."""

    sends: int
    per_host: int


@dataclass
class Deferred:
    """Messages of an open circuit, to give back until it ends (no attempt counted)."""

    message: Message
    seconds: float
    note: str


@dataclass
class Handed:
    """What the send threads hand back to the relay's thread."""

    done: list[DeliveryOutcome] = field(default_factory=list)
    done_since: float | None = None  # when the oldest of ``done`` came (monotonic)
    deferred: list[Deferred] = field(default_factory=list)
    released: list[Message] = field(default_factory=list)  # to give back (over a lane's room)


class Dispatcher:
    """One relay's lanes, send threads and the messages it holds."""

    def __init__(
        self,
        relay_id: str,
        transports: Transports,
        limits: Limits,
        heartbeat: ClaimHeartbeat,
        retries: Retries,
        rules: BreakerRules,
        wake: Callable[[], None],
        attempted: Callable[[list[Message]], None] = lambda chunk: None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.relay_id = relay_id
        self.transports = transports
        self.limits = limits
        self.heartbeat = heartbeat
        self.retries = retries
        self.rules = rules
        self.wake = wake
        self.attempted = attempted
        # Set when the relay stops: no send starts after the ones under way.
        self.stopping = stopping if stopping is not None else threading.Event()
        self._cond = threading.Condition()
        self.lanes: dict[tuple[object, str | None], Lane] = {}
        self._turns: deque[Lane] = deque()  # lanes with queued messages, in turn
        self.held: dict[uuid.UUID, Message] = {}  # claimed, not settled (or given back)
        self._hosts: dict[object, str | None] = {}  # host_of() by the claim's host id
        # When the relay's thread wakes next by itself (monotonic): a send thread wakes it
        # sooner only when it should settle before then.
        self.wakes_at = 0.0
        self.held_bytes = 0
        self.handed = Handed()
        self.jobs: set[int] = set()  # ids of the jobs under way
        self._jobs: dict[int, Job] = {}
        self._by_host: Counter[str | None] = Counter()
        self._threads = 0
        self._idle = 0
        self._closed = False
        self.breaker_changes = 0  # breakers whose state changed since the relay wrote them
        heartbeat.on_give_up = self.gave_up

    # -- the relay's thread ------------------------------------------------------------------
    def add(self, messages: Iterable[Message]) -> None:
        """Hold claimed messages and queue each in its lane (started within the limits)."""
        with self._cond:  # no claim twice (one taken again with its token: Claiming.free)
            messages = [m for m in messages if not self._holds(m)]
        if not messages:
            return
        self.heartbeat.hold(messages)
        failed: list[DeliveryOutcome] = []
        with self._cond:
            for message in messages:
                self.held[message.id] = message
                self.held_bytes += message.size
                lane = self._lane_of(message, failed)
                if lane is None:
                    continue
                if lane.breaker.is_open():
                    self._hold_back(lane, [message])
                    continue
                if not lane.queue:
                    self._turns.append(lane)
                lane.queue.append(message)
                if len(lane.topics) < TOPICS_KEPT:
                    lane.topics.add(message.topic)
            if failed:
                self._hand(failed)
            self._start()

    def _holds(self, message: Message) -> bool:
        """Whether the relay holds this very claim of ``message`` (its id and attempt: a
        later claim of a message whose earlier one still hangs is a claim of its own)."""
        held = self.held.get(message.id)
        return held is not None and held.attempt == message.attempt

    def _lane_of(self, message: Message, failed: list[DeliveryOutcome]) -> Lane | None:
        """The message's lane (made when first needed); None when it has no route, its
        failure added to ``failed``."""
        key = message.host_id
        host = self._hosts.get(key, "")
        if host == "":
            if len(self._hosts) >= 10_000:
                self._hosts.clear()
            host = self._hosts[key] = host_of(message)
        try:
            route = self.transports.route_for(message.topic, host)
            lane = self.lanes.get((route, host))
            if lane is None:
                lane = self._new_lane(route, host)
        except Exception as exc:  # no route, not granted, a transport that cannot be built
            failed.append(self.retries.outcome(message, exc))
            return None
        return lane

    def _new_lane(self, route: object, host: str | None) -> Lane:
        transport: Transport = self.transports.for_route(route)  # type: ignore[arg-type]
        entry = self.transports.entry(route)  # type: ignore[arg-type]
        where = "DSCHED_TRANSPORTS" if route.host is None else f"{route.host}"  # type: ignore[attr-defined]
        lane = Lane(
            key=(route, host),
            label=f"{where}[{route.key!r}]",  # type: ignore[attr-defined]
            transport=transport,
            limit=concurrency(entry, transport),
            breaker=Breaker(self.rules),
        )
        self.lanes[lane.key] = lane
        return lane

    def take(self) -> Handed:
        """What the send threads handed back since the last call."""
        with self._cond:
            handed, self.handed = self.handed, Handed()
        for outcome in handed.done:
            self._forget(outcome.message)
        for deferred in handed.deferred:
            self._forget(deferred.message)
        for message in handed.released:
            self._forget(message)
        return handed

    def _forget(self, message: Message) -> None:
        if self.held.pop(message.id, None) is not None:
            self.held_bytes -= message.size

    def held_back(self) -> list[str]:
        """``host topic`` of the lanes whose messages the next claim passes over: full, or
        their circuit open."""
        with self._cond:
            return sorted(
                f"{lane.host} {topic}"
                for lane in self.lanes.values()
                if lane.host is not None and (lane.full() or lane.breaker.is_open())
                for topic in lane.topics
            )

    def trim(self) -> None:
        """Give back what lanes hold beyond their room (once their pace is known, and they
        hold twice that and :data:`.lanes.TRIM_FLOOR`): another relay may send it sooner."""
        with self._cond:
            for lane in self.lanes.values():
                for _ in range(lane.excess()):
                    self.handed.released.append(lane.queue.pop())

    def busy(self) -> bool:
        """Whether anything is queued or under way."""
        with self._cond:
            return self.busy_locked()

    def busy_locked(self) -> bool:
        return bool(self.jobs) or any(lane.queue for lane in self._turns)

    def settle_due(self, wait: float) -> float | None:
        """Seconds until the outcomes handed back should be settled (0: now); None if none."""
        with self._cond:
            if not self.handed.done and not self.handed.deferred and not self.handed.released:
                return None
            if self.handed.deferred or self.handed.released or len(self.handed.done) >= SETTLE_MIN:
                return 0.0
            if not self.busy_locked():
                return 0.0
            since = self.handed.done_since or time.monotonic()
            return max(0.0, since + wait - time.monotonic())

    def reopen(self) -> None:
        """The relay runs again after :meth:`close`."""
        with self._cond:
            self._closed = False

    def close(self) -> list[Message]:
        """Stopping: start no send; the messages queued, to give back."""
        with self._cond:
            self._closed = True
            queued = [m for lane in self._turns for m in lane.queue]
            for lane in self._turns:
                lane.queue.clear()
            self._turns.clear()
            self._cond.notify_all()
        return queued

    def wait_sends(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the sends under way; whether none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.jobs:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    # -- sends -------------------------------------------------------------------------------
    def _start(self, taking: int = 0) -> None:
        """Wake or start send threads for the sends the limits allow now, but ``taking`` that
        a thread about to look for work itself takes (lock held)."""
        if self._closed:
            return
        startable = self._startable() - taking
        while startable > self._idle and self._threads < self.limits.sends:
            self._threads += 1
            self._idle += 1  # counted idle until it takes a job
            threading.Thread(
                target=self._work, name=f"dsched-send-{self.relay_id}", daemon=True
            ).start()
        if startable > 0:
            self._cond.notify(startable)

    def _startable(self) -> int:
        """How many sends could start now (an estimate, lock held)."""
        room = self.limits.sends - len(self.jobs)
        count = 0
        for lane in self._turns:
            if count >= room:
                break
            if self._may_send(lane):
                count += min(lane.limit - lane.sending, -(-len(lane.queue) // lane.batch))
        return max(0, min(count, room))

    def _may_send(self, lane: Lane) -> bool:
        return (
            bool(lane.queue)
            and lane.sending < lane.limit
            and self._by_host[lane.host] < self.limits.per_host
            and lane.breaker.may_send()
        )

    def _next_job(self) -> Job | None:
        """The next lane in turn that may send: its next chunk (lock held)."""
        if self._closed or self.stopping.is_set() or len(self.jobs) >= self.limits.sends:
            return None
        for _ in range(len(self._turns)):
            lane = self._turns[0]
            self._turns.rotate(-1)
            if not lane.queue:
                self._turns.remove(lane)
                continue
            if not self._may_send(lane):
                continue
            free = lane.limit - lane.sending
            chunk = lane.take(min(RUN_MESSAGES, -(-len(lane.queue) // free)))
            if not lane.queue:
                self._turns.remove(lane)
            lane.sending += 1
            lane.breaker.sending()
            self._by_host[lane.host] += 1
            job = Job(lane, chunk)
            self.jobs.add(id(job))
            self._jobs[id(job)] = job
            return job
        return None

    def _work(self) -> None:
        """A send thread: take the next job, send it, hand its outcomes back; end when idle."""
        try:
            while True:
                with self._cond:
                    job = self._next_job()
                    while job is None:
                        if self._closed:
                            return
                        woken = self._cond.wait(IDLE_SECONDS)
                        job = self._next_job()
                        if job is None and not woken:
                            return
                    self._idle -= 1
                try:
                    self._send(job)
                finally:
                    with self._cond:
                        self._idle += 1
        finally:
            with self._cond:
                self._threads -= 1
                self._idle -= 1
            connections.close_all()  # what a handler opened on this thread

    def _send(self, job: Job) -> None:
        """Send a job's messages, a chunk (the transport's batch) a call, while they go
        through (a run: :data:`RUN_MESSAGES`, :data:`RUN_SECONDS`); what is left goes back."""
        lane = job.lane
        lost = self.heartbeat.lost() if self.heartbeat.lost_any else set()
        job.todo = [m for m in job.messages if m.id not in lost]
        sends: list[list[DeliveryOutcome]] = []
        while True:
            with self._cond:  # gave_up() gives back what is not handed to the transport
                done = job.handed
                if done >= len(job.todo) or (
                    done
                    and (
                        self.stopping.is_set()
                        or job.given_up
                        or time.monotonic() - job.started >= RUN_SECONDS
                    )
                ):
                    break
                chunk = job.todo[done : done + lane.batch]
                job.handed += len(chunk)
            outcomes = self._send_chunk(job, chunk)
            sends.append(outcomes)
            if not any(o.delivered or o.permanent for o in outcomes):
                break  # a failed send ends the run: its circuit is judged first
        dropped = [m for m in job.messages if m.id in lost]
        self._finish(job, sends, dropped, job.todo[job.handed :])

    def _send_chunk(self, job: Job, chunk: list[Message]) -> list[DeliveryOutcome]:
        """One call of the transport: each message's outcome."""
        transport = job.lane.transport
        assert transport is not None
        self.attempted(chunk)
        hands_off = transport.hands_off
        started = time.monotonic()
        if not hands_off:  # the heartbeat marks a long run RUNNING while it runs
            self.heartbeat.running(id(job), [m.id for m in chunk], started)
        try:
            results = transport.send_many(chunk)
        except Exception as exc:  # a transport bug must not end the thread
            logger.exception("transport failed unexpectedly relay=%s", self.relay_id)
            results = [exc] * len(chunk)
        ended = time.monotonic()
        if not hands_off:
            self.heartbeat.running(id(job), (), None)
        job.lane.measured(len(chunk), ended - started)
        began = None if hands_off else started
        return [
            self.retries.outcome(m, result, began, ended)
            for m, result in zip(chunk, results, strict=True)
        ]

    def _finish(
        self,
        job: Job,
        sends: list[list[DeliveryOutcome]],
        lost: list[Message],
        unsent: list[Message],
    ) -> None:
        """Hand a job's outcomes back, put what it did not send back in its lane, judge the
        lane's circuit send by send, go on (lock taken)."""
        lane = job.lane
        if lost:
            self.heartbeat.drop(m.id for m in lost)
        with self._cond:
            self.jobs.discard(id(job))
            self._jobs.pop(id(job), None)
            lane.sending -= 1
            self._by_host[lane.host] -= 1
            for message in lost:
                self._forget(message)
            was_full = lane.full()
            if unsent:
                if not lane.queue:
                    self._turns.append(lane)
                lane.queue.extendleft(reversed(unsent))
            if job.given_up:
                lane.breaker.returned()
                self.breaker_changes += 1
            for outcomes in sends:
                self._judge(lane, outcomes)
            self._hand([o for outcomes in sends for o in outcomes])
            if lost or (was_full and not lane.full()):
                self.wake()  # room again: the claims may take more (of its messages too)
            self._start(taking=1)
            if not self.jobs:
                self._cond.notify_all()  # wait_sends

    def _judge(self, lane: Lane, outcomes: list[DeliveryOutcome]) -> None:
        """A send's outcomes tell its destination's health (lock held)."""
        breaker = lane.breaker
        if any(o.delivered or o.permanent for o in outcomes):
            if breaker.opened:
                logger.warning(
                    "circuit closed: %s answers again host=%s relay=%s",
                    lane.label,
                    lane.host,
                    self.relay_id,
                )
            breaker.succeeded()
        elif breaker.failed(outcomes[0].error):
            logger.warning(
                "circuit open for %.0fs: %s failed %d send(s) in a row (last: %s) host=%s relay=%s",
                breaker.seconds_left(),
                lane.label,
                breaker.failures,
                outcomes[0].error,
                lane.host,
                self.relay_id,
            )
            self._hold_back(lane, list(lane.queue))
            lane.queue.clear()
        if breaker.changed:
            self.breaker_changes += 1

    def _hold_back(self, lane: Lane, messages: list[Message]) -> None:
        """Messages of an open lane, to give back (lock held): while a send of it hangs, at
        once (another relay may send them: the hang may be this process's); else until its
        circuit ends (the destination fails for every relay)."""
        if not messages:
            return
        if lane.breaker.stuck:
            self.handed.released.extend(messages)
            self.wake()
            return
        seconds = max(lane.breaker.seconds_left(), 1.0)
        note = (
            f"circuit open: {lane.label} failed {lane.breaker.failures} send(s) in a row "
            f"(last: {lane.breaker.last_error}); held back for {seconds:.0f}s, this attempt "
            "not counted"
        )
        self.handed.deferred.extend(Deferred(m, seconds, note) for m in messages)
        self.wake()

    def _hand(self, outcomes: list[DeliveryOutcome]) -> None:
        """Hand outcomes to the relay's thread; wake it when it should settle (lock held)."""
        if not outcomes:
            return
        first = not self.handed.done
        self.handed.done.extend(outcomes)
        now = time.monotonic()
        if first:
            self.handed.done_since = now
        # Wake the relay's thread only if it would not settle soon enough by itself.
        if self.wakes_at > now + SETTLE_WAIT and (
            first or len(self.handed.done) >= SETTLE_MIN or not self.busy_locked()
        ):
            self.wakes_at = now
            self.wake()

    def gave_up(self, job_id: int) -> None:
        """The heartbeat gave a hung send's claims up: its lane is open while it hangs."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.given_up:
                return
            job.given_up = True
            unsent, job.todo = job.todo[job.handed :], job.todo[: job.handed]
            if unsent:  # the rest of its run: not sent, given back at once
                self.handed.released.extend(unsent)
                self.wake()
            lane = job.lane
            lane.breaker.hung("a send has run longer than DSCHED_RELAY_MAX_RUN_SECONDS")
            self.breaker_changes += 1
            self._hold_back(lane, list(lane.queue))
            lane.queue.clear()

    def breakers(self) -> list[Lane]:
        """The lanes whose circuit is not closed, or changed since the last call."""
        with self._cond:
            self.breaker_changes = 0
            changed = [lane for lane in self.lanes.values() if lane.breaker.changed]
            for lane in changed:
                lane.breaker.changed = False
            return changed
