"""A relay's claims, made on threads of their own, each with its own database session, so the
relay's thread records outcomes while claims run: the database claims and settles at once,
and the send threads send meanwhile (:mod:`.relay`, :mod:`.dispatch`).

Up to :data:`IN_FLIGHT` claims run at once, each on its own thread and session: a relay
draining a backlog of fast sends is bound by its claims, one after the other, and a second
claim runs while the first one's statement does (``SKIP LOCKED`` gives them different rows).
The second runs only while the relay is behind, or the first runs long
(:data:`BEHIND_AFTER`): one keeping up claims one batch at a time.
The relay counts a claim in flight as held (its limit and byte cap), so it never holds more
than its bound once they end.

The relay claims here while it holds messages or another claim runs (a claim that holds
nothing up is made on the relay's own session). A session is opened at the first claim on its
thread and closed when the relay holds and claims nothing and none ran there for
:data:`CLOSE_AFTER` seconds (:meth:`Claiming.idle`), and when it stops. A claim's messages are
held by the claim heartbeat once the relay takes them: one taken long after its claim began
is renewed first, fenced, and what another relay took over meanwhile is not sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass

from django.db import connections

from django_dsched.outbox.messages import Claimed

# Most claims a relay runs at once (each on a thread and session of its own).
IN_FLIGHT = 2

# A second claim runs beside the one in flight only while the relay is behind: its last claim
# took a message that had waited longer than this since its fire or the end of its backoff
# (seconds), or the claim in flight has run longer than this. A relay keeping up with the
# fires claims one batch at a time: two claims at once there took the database's CPU from
# the fires themselves, and a burst fired and delivered on shared cores took longer
# (bench/NOTES.md, issue 44).
BEHIND_AFTER = 1.0

# A claim thread's session is closed once the relay is idle and no claim ran on it for this
# long (seconds): a relay going idle and busy again does not connect each time.
CLOSE_AFTER = 10.0

# Claims a batch on the calling thread's session: (limit, max_bytes, since, held back, the
# hosts' turn) → the batch.
Claim = Callable[[int, int, int | None, list[str], int], Claimed]


@dataclass
class Asked:
    """A claim in flight: its result, the limit and byte cap it asked, when it began
    (monotonic) and the relay's pin generation then (:mod:`~django_dsched.runtime.one_server`)."""

    future: Future[Claimed]
    limit: int
    max_bytes: int
    began: float
    generation: int


@dataclass
class Taken:
    """A claim that ended: its batch, the limit it asked, when it began, the generation."""

    claimed: Claimed
    limit: int
    began: float
    generation: int


class _Thread:
    """One claim thread: its executor, whether it holds a session, its claim in flight."""

    def __init__(self, name: str) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.session = False
        self.used = 0.0  # when the last claim began on it (monotonic)
        self.asked: Asked | None = None


class Claiming:
    """One relay's claims in flight on its claim threads, if any."""

    def __init__(self, relay_id: str, using: str, claim: Claim, wake: Callable[[], None]) -> None:
        self.relay_id = relay_id
        self.using = using
        self._claim = claim
        self._wake = wake
        self._threads: list[_Thread] = []

    def _flying(self) -> list[Asked]:
        """The claims in flight."""
        return [t.asked for t in self._threads if t.asked is not None]

    @property
    def running(self) -> bool:
        """Whether a claim is in flight."""
        return any(thread.asked is not None for thread in self._threads)

    def free(self, generation: int) -> bool:
        """Whether another claim may start: fewer than :data:`IN_FLIGHT` run, and none began
        before the relay's session moved (pin ``generation``: a claim made on the server
        left behind is taken, and dropped, before one on the new server may claim the same
        rows again under the same fencing token)."""
        flying = self._flying()
        return len(flying) < IN_FLIGHT and all(a.generation == generation for a in flying)

    def running_for(self) -> float:
        """Seconds the claim in flight begun first has run (0: none runs)."""
        flying = self._flying()
        return time.monotonic() - min(a.began for a in flying) if flying else 0.0

    def asked(self) -> tuple[int, int]:
        """The rows and bytes the claims in flight may bring."""
        flying = self._flying()
        return sum(a.limit for a in flying), sum(a.max_bytes for a in flying)

    def start(
        self,
        limit: int,
        max_bytes: int,
        since: int | None,
        held_back: list[str],
        rotate: int,
        generation: int,
    ) -> None:
        """Start a claim on a free claim thread; the relay is woken when it ends."""
        thread = next((t for t in self._threads if t.asked is None), None)
        if thread is None:
            assert len(self._threads) < IN_FLIGHT, "no claim thread is free"
            thread = _Thread(f"dsched-claim-{self.relay_id}-{len(self._threads)}")
            self._threads.append(thread)
        thread.session = True
        thread.used = time.monotonic()
        future = thread.pool.submit(self._claim_here, limit, max_bytes, since, held_back, rotate)
        future.add_done_callback(lambda _: self._wake())
        thread.asked = Asked(future, limit, max_bytes, time.monotonic(), generation)

    def _claim_here(
        self, limit: int, max_bytes: int, since: int | None, held_back: list[str], rotate: int
    ) -> Claimed:
        # On a claim thread.
        try:
            return self._claim(limit, max_bytes, since, held_back, rotate)
        except BaseException:
            connections[self.using].close()  # a new session for the next claim
            raise

    def take(self, wait: float = 0.0) -> Taken | None:
        """A claim in flight once it ended, the one begun first (waiting at most ``wait``
        seconds for it); None while it runs, or if none. Its database error, if it failed,
        is raised here (on the relay's thread): the other claims stay to take."""
        flying = [t for t in self._threads if t.asked is not None]
        if not flying:
            return None
        done = [t for t in flying if t.asked is not None and t.asked.future.done()]
        thread = min(done or flying, key=lambda t: t.asked.began if t.asked else 0.0)
        asked = thread.asked
        assert asked is not None
        if not asked.future.done():
            if wait <= 0:
                return None
            try:
                asked.future.exception(timeout=wait)  # waits
            except TimeoutError:
                return None  # it still runs
        thread.asked = None
        return Taken(asked.future.result(), asked.limit, asked.began, asked.generation)

    def wait(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds in all) for every claim in flight to end."""
        futures = [a.future for a in self._flying()]
        if futures:
            wait_for_futures(futures, timeout)

    def idle(self, *, now: bool = False) -> None:
        """The relay holds and claims nothing: close each claim thread's session if no claim
        ran on it for :data:`CLOSE_AFTER` seconds (``now``: at once)."""
        for thread in self._threads:
            if (
                thread.session
                and thread.asked is None
                and (now or time.monotonic() - thread.used >= CLOSE_AFTER)
            ):
                thread.session = False
                thread.pool.submit(_close, self.using)

    def close(self) -> None:
        self.idle(now=True)
        for thread in self._threads:
            thread.pool.shutdown(wait=True)
        self._threads = []


def _close(using: str) -> None:
    # On a claim thread: its session.
    connections[using].close()
