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

The beat also records when the message the relay is running now started (``started_ts``), so
a long run shows as RUNNING while it runs; the settle statement writes it for every message.

With ``DSCHED_RELAY_MAX_RUN_SECONDS`` set, a send that has not returned after that long (a
hung handler, an endpoint that never answers) makes the heartbeat give the whole batch up: it
renews none of its claims again and reports them all lost, so they expire and another relay
delivers them (a new attempt), while this relay, if its send ever returns, sends none of the
rest. The late send's own outcome is still settled, fenced on its claim as always: it counts
only if nobody took the message over meanwhile.

The thread opens its connection at the first renewal of a batch and closes it when the batch
is done, so a relay whose batches finish within an interval never opens it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence

from django.db import connections

from django_dsched.outbox.claims import Claimer, Message
from django_dsched.outbox.holding import extend
from django_dsched.runtime.logs import get_logger

logger = get_logger(__name__)

# A message run by the relay itself shows as RUNNING once it has run this long (seconds): the
# heartbeat writes its start then, instead of waiting for the next renewal.
MARK_RUNNING_AFTER = 1.0


class ClaimHeartbeat:
    """Renews the claims of the batch a relay is delivering, from its own thread."""

    def __init__(
        self, claimer: Claimer, interval: float, using: str, max_run: float | None = None
    ) -> None:
        self.claimer = claimer
        self.interval = interval
        self.using = using
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
        self._running: tuple[tuple[uuid.UUID, ...], float] | None = None
        self._marked: set[uuid.UUID] = set()
        self._next_beat = 0.0
        self._thread: threading.Thread | None = None
        # hold() comes from the relay's thread and from its claim-ahead thread.
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

    def running(self, ids: Sequence[uuid.UUID], since: float | None) -> None:
        """The relay is running ``ids`` since ``since`` (monotonic); None: nothing now."""
        # No wake-up here (this is called around every send): while a batch is held the
        # thread looks at least every MARK_RUNNING_AFTER seconds.
        with self._lock:
            self._running = (tuple(ids), since) if ids and since is not None else None

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
            mark = self._unmarked_run()
            if mark is not None:
                wait = min(wait, mark[1] + MARK_RUNNING_AFTER - now)
        return max(0.0, wait)

    def _unmarked_run(self) -> tuple[tuple[uuid.UUID, ...], float] | None:
        if self._running is None:
            return None
        ids, _ = self._running
        return self._running if any(i not in self._marked for i in ids) else None

    def _due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if not self._held:
                return False
            if now >= self._next_beat:
                return True
            mark = self._unmarked_run()
            return mark is not None and now >= mark[1] + MARK_RUNNING_AFTER

    def _give_up(self, running: Sequence[uuid.UUID], running_for: float) -> None:
        """The send in hand has run past the maximum: renew nothing of the batch again and
        report every claim lost, so the relay sends none of the rest if it ever returns.

        A send that returns just as the batch is given up may let the relay start the next
        chunk before it sees the loss: that chunk can then be delivered twice (once here,
        once by the relay that takes it over), never lost, as with any expired claim."""
        with self._lock:
            given_up = set(self._held)
            self._lost |= given_up
            self.lost_any = bool(self._lost)
            self._held.clear()
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
            messages = list(self._held.values())
            running = self._running
            self._next_beat = time.monotonic() + self.interval
        if not messages:
            return
        ids: tuple[uuid.UUID, ...] = ()
        running_for = 0.0
        if running is not None:
            ids, since = running
            running_for = time.monotonic() - since
            if self.max_run is not None and running_for > self.max_run:
                self._give_up(ids, running_for)
                return
        try:
            with self.writing:
                held, refused = extend(self.using, self.claimer, messages, ids, running_for)
        except Exception:  # the database is away: try again next beat, on a new connection
            logger.warning(
                "heartbeat could not renew %d claim(s) relay=%s",
                len(messages),
                self.claimer.relay_id,
                exc_info=True,
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
            self._marked.update(ids)
        if lost:
            logger.warning(
                "%d claim(s) expired before the heartbeat and were taken over relay=%s",
                len(lost),
                self.claimer.relay_id,
            )
