"""A relay's claim heartbeat: keep the claims of the batch in hand alive while it runs.

A claim lasts ``DSCHED_RELAY_VISIBILITY_TIMEOUT``. A handler may run longer than that; without
a heartbeat its message would become claimable again and another relay would deliver it a
second time while the first run is still going. So while a relay delivers a batch, a thread of
its own, with its own database connection, renews every claim of the batch not settled yet
every ``DSCHED_RELAY_HEARTBEAT_INTERVAL`` seconds (default: a quarter of the timeout), in one
statement fenced on ``(claimed_by, attempts)`` (:data:`.holding.EXTEND`): a claim this relay lost
to another is never extended, and is reported lost so the relay does not send it. A claim the
database refuses to renew (a rule an operator added) is narrowed down to
(:mod:`.refused`), logged and reported lost; the others are renewed.

A relay that stops (killed, frozen by SIGSTOP, its host gone) stops heartbeating too: its
claims expire after the timeout and another relay delivers them again.

The beat also records when each message the relay is sending now started (``started_ts``),
so a long run shows as RUNNING while it runs; the settle statement writes it for every
message. A relay sends several chunks at once (:mod:`.dispatch`): each is tracked apart.

With ``DSCHED_RELAY_MAX_RUN_SECONDS`` set, a send that has not returned after that long (a
hung handler, an endpoint that never answers) makes the heartbeat give that send's claims
up: it renews them no more and reports them lost, so they expire and another relay
delivers them (a new attempt), and tells the relay (``on_give_up``), which holds its
destination back while the send hangs (:mod:`.breaker`). The late send's own outcome is
still settled, fenced on its claim as always: it counts only if nobody took the message
over meanwhile. The relay's other sends go on.

The thread opens its connection at the first renewal of a batch and closes it when the batch
is done, so a relay whose batches finish within an interval never opens it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

from django.db import DatabaseError, connections

from django_dsched.outbox.holding import extend
from django_dsched.outbox.messages import Claimer, Message
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import first_line
from django_dsched.runtime.one_server import ServerPin

logger = get_logger(__name__)

# A message run by the relay itself shows as RUNNING once it has run this long (seconds): the
# heartbeat writes its start then, instead of waiting for the next renewal.
MARK_RUNNING_AFTER = 1.0


class ClaimHeartbeat:
    """Renews the claims of the batch a relay is delivering, from its own thread."""

    def __init__(
        self,
        claimer: Claimer,
        interval: float,
        using: str,
        max_run: float | None = None,
        pin: ServerPin | None = None,
    ) -> None:
        self.claimer = claimer
        self.interval = interval
        self.using = using
        # The relay's server: the thread's session must be on it (runtime/one_server.py).
        self.pin = pin
        # Seconds a send may run before the batch is given up (None: no limit).
        self.max_run = max_run
        self.beats = 0  # renewal statements run (for tests and logs)
        # Held around every statement that writes the batch's rows, the relay's (settle,
        # renew, release) and the heartbeat's: two statements locking the same rows in
        # different orders could deadlock each other.
        self.writing = threading.Lock()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._held: dict[uuid.UUID, Message] = {}
        self._lost: set[uuid.UUID] = set()
        # Whether any claim is reported lost (read without the lock, once per send, by the
        # relay: it asks for the set only then).
        self.lost_any = False
        # The sends under way: their messages and since when (monotonic), by send.
        self._running: dict[int, tuple[tuple[uuid.UUID, ...], float]] = {}
        self._marked: set[uuid.UUID] = set()
        # Called (from the heartbeat's thread) with a send given up.
        self.on_give_up: Callable[[int], None] = lambda send: None
        self._next_beat = 0.0
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    # -- the relay's side ------------------------------------------------------------------
    def hold(self, messages: Iterable[Message]) -> None:
        """The relay claimed these: keep them alive until :meth:`drop`."""
        self._ensure_thread()
        with self._lock:
            idle = not self._held
            if idle:
                self._next_beat = time.monotonic() + self.interval
            self._held.update((m.id, m) for m in messages)
        if idle:  # the thread sleeps until something is held
            self._wake.set()

    def drop(self, ids: Iterable[uuid.UUID]) -> None:
        """These are settled or released: no more renewals."""
        with self._lock:
            pop = self._held.pop
            if self._lost or self._marked:
                for id_ in ids:
                    pop(id_, None)
                    self._lost.discard(id_)
                    self._marked.discard(id_)
                self.lost_any = bool(self._lost)
            else:
                for id_ in ids:
                    pop(id_, None)

    def running(self, send: int, ids: Sequence[uuid.UUID], since: float | None) -> None:
        """Send ``send`` runs ``ids`` since ``since`` (monotonic); no ids: it ended."""
        # No wake-up here (this is called around every send): while claims are held the
        # thread looks at least every MARK_RUNNING_AFTER seconds.
        with self._lock:
            if ids and since is not None:
                self._running[send] = (tuple(ids), since)
            else:
                self._running.pop(send, None)

    def lost(self) -> set[uuid.UUID]:
        """Claims found taken over by another relay (not to be sent)."""
        with self._lock:
            return set(self._lost)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- the thread ------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        with self._starting:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run,
                    name=f"dsched-heartbeat-{self.claimer.relay_id}",
                    daemon=True,
                )
                self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(self._timeout())
                self._wake.clear()
                if self._stop.is_set():
                    break
                if self._due():
                    self.beat()
                with self._lock:
                    idle = not self._held
                if idle:
                    connections[self.using].close()
        finally:
            connections[self.using].close()

    def _timeout(self) -> float | None:
        with self._lock:
            if not self._held:
                return None
            now = time.monotonic()
            wait = min(self._next_beat - now, MARK_RUNNING_AFTER)
            mark = self._unmarked_since()
            if mark is not None:
                wait = min(wait, mark + MARK_RUNNING_AFTER - now)
        return max(0.0, wait)

    def _unmarked_since(self) -> float | None:
        """When the oldest send with a message not marked running yet started (lock held)."""
        starts = [
            since
            for ids, since in self._running.values()
            if any(i not in self._marked for i in ids)
        ]
        return min(starts) if starts else None

    def _due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if not self._held:
                return False
            if now >= self._next_beat:
                return True
            mark = self._unmarked_since()
            return mark is not None and now >= mark + MARK_RUNNING_AFTER

    def _give_up(self, send: int, running: Sequence[uuid.UUID], running_for: float) -> None:
        """A send has run past the maximum: renew its claims no more and report them lost,
        so the relay sends none of them if it ever returns (its outcome is settled, fenced)."""
        with self._lock:
            given_up = set(running) & self._held.keys()
            self._lost |= given_up
            self.lost_any = bool(self._lost)
            for id_ in given_up:
                del self._held[id_]
            self._running.pop(send, None)
        logger.error(
            "gave up %d claim(s) relay=%s: a send has run %.0f s, longer than "
            "DSCHED_RELAY_MAX_RUN_SECONDS (%g s), ids=%s; they expire after the visibility "
            "timeout and another relay delivers them",
            len(given_up),
            self.claimer.relay_id,
            running_for,
            self.max_run,
            ", ".join(str(i) for i in running),
            extra={"message_id": str(running[0])} if running else None,
        )
        self.on_give_up(send)

    def refused_renewals(self, refused: list[tuple[Message, str]]) -> None:
        """Log the claims the database refused to renew (they count as lost: not sent)."""
        for message, error in refused:
            logger.error(
                "the database refused to renew the claim of message %s (%s): it is not sent "
                "by this relay, and is claimed again once its claim expires relay=%s",
                message.id,
                error,
                self.claimer.relay_id,
                extra={"message_id": str(message.id)},
            )

    def beat(self) -> None:
        """Renew every held claim now (one statement); note the ones lost."""
        with self._lock:
            running = dict(self._running)
            self._next_beat = time.monotonic() + self.interval
        now = time.monotonic()
        for send, (ids, since) in running.items():
            if self.max_run is not None and now - since > self.max_run:
                self._give_up(send, ids, now - since)
        with self._lock:
            messages = list(self._held.values())
            ago = {
                id_: now - since
                for ids, since in self._running.values()
                for id_ in ids
                if id_ in self._held
            }
        if not messages:
            return
        try:
            if self.pin is not None:
                self.pin.check(connections[self.using])
            with self.writing:
                held, refused = extend(self.using, self.claimer, messages, ago)
        except DatabaseError as exc:  # away, or another server: next beat, a new session
            logger.warning(
                "heartbeat could not renew %d claim(s) (%s) relay=%s",
                len(messages),
                first_line(exc),
                self.claimer.relay_id,
            )
            connections[self.using].close()
            return
        except Exception:  # not the database's: said in full, and tried again next beat
            logger.exception(
                "heartbeat could not renew %d claim(s) relay=%s",
                len(messages),
                self.claimer.relay_id,
            )
            connections[self.using].close()
            return
        self.beats += 1
        self.refused_renewals(refused)
        lost = {m.id for m in messages} - held
        with self._lock:
            lost &= self._held.keys()  # settled meanwhile: not lost
            self._lost |= lost
            self.lost_any = bool(self._lost)
            self._marked.update(ago)
        if lost:
            logger.warning(
                "%d claim(s) expired before the heartbeat and were taken over relay=%s",
                len(lost),
                self.claimer.relay_id,
            )
