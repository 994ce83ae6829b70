"""A relay's claims, made on a thread of their own with their own database session, so the
relay's thread records outcomes while the next claim runs: the database claims and settles at
once, and the send threads send meanwhile (:mod:`.relay`, :mod:`.dispatch`).

The relay claims here while it holds messages (a claim that holds nothing up is made on the
relay's own session). The session is opened at the first claim here and closed when the relay
holds and claims nothing and none ran here for :data:`CLOSE_AFTER` seconds
(:meth:`Claiming.idle`), and when it stops. A claim's messages are held by the claim
heartbeat once the relay takes them: one taken long after its claim began is renewed first,
fenced, and what another relay took over meanwhile is not sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections

from django_dsched.outbox.messages import Claimed

# The claim thread's session is closed once the relay is idle and no claim ran on it for this
# long (seconds): a relay going idle and busy again does not connect each time.
CLOSE_AFTER = 10.0

# Claims a batch on the calling thread's session: (limit, max_bytes, since, held back) → the
# batch.
Claim = Callable[[int, int, int | None, list[str]], Claimed]


class Claiming:
    """One relay's claim in flight on its claim thread, if any."""

    def __init__(self, relay_id: str, using: str, claim: Claim, wake: Callable[[], None]) -> None:
        self.relay_id = relay_id
        self.using = using
        self._claim = claim
        self._wake = wake
        self._pool: ThreadPoolExecutor | None = None
        self._session = False  # whether the claim thread holds a session
        self._used = 0.0  # when the last claim began on it (monotonic)
        # The claim in flight: its result, the limit it asked, when it began (monotonic).
        self._future: tuple[Future[Claimed], int, float] | None = None

    @property
    def running(self) -> bool:
        return self._future is not None

    def start(self, limit: int, max_bytes: int, since: int | None, held_back: list[str]) -> None:
        """Start a claim on the claim thread; the relay is woken when it ends."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"dsched-claim-{self.relay_id}"
            )
        self._session = True
        self._used = time.monotonic()
        future = self._pool.submit(self._claim_here, limit, max_bytes, since, held_back)
        future.add_done_callback(lambda _: self._wake())
        self._future = (future, limit, time.monotonic())

    def _claim_here(
        self, limit: int, max_bytes: int, since: int | None, held_back: list[str]
    ) -> Claimed:
        # On the claim thread.
        try:
            return self._claim(limit, max_bytes, since, held_back)
        except BaseException:
            connections[self.using].close()  # a new session for the next claim
            raise

    def take(self, wait: float = 0.0) -> tuple[Claimed, int, float] | None:
        """The claim in flight once it ended (waiting at most ``wait`` seconds): its batch,
        the limit it asked and when it began; None while it runs, or if none. Its database
        error, if it failed, is raised here (on the relay's thread)."""
        if self._future is None:
            return None
        future, limit, began = self._future
        if not future.done():
            if wait <= 0:
                return None
            try:
                future.exception(timeout=wait)  # waits
            except TimeoutError:
                return None  # it still runs
        self._future = None
        return future.result(), limit, began

    def idle(self, *, now: bool = False) -> None:
        """The relay holds and claims nothing: close the claim thread's session if no claim
        ran on it for :data:`CLOSE_AFTER` seconds (``now``: at once)."""
        if (
            self._pool is not None
            and self._session
            and self._future is None
            and (now or time.monotonic() - self._used >= CLOSE_AFTER)
        ):
            self._session = False
            using = self.using
            self._pool.submit(lambda: connections[using].close())

    def close(self) -> None:
        if self._pool is not None:
            self.idle(now=True)
            self._pool.shutdown(wait=True)
            self._pool = None
