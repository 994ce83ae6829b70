"""Claiming ahead: under a backlog, a relay claims its next batch on a thread of its own (with
its own database session) while it sends the end of the batch in hand, so the database claims
while Python sends.

The log lines are the relay's (logger ``django_dsched.outbox.relay``, docs/delivery.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.db import Error, connections

from django_dsched.outbox.claims import Claimed, Claimer, Message
from django_dsched.outbox.heartbeat import ClaimHeartbeat
from django_dsched.outbox.pace import Pace
from django_dsched.runtime.logs import get_logger
from django_dsched.runtime.loops import first_line

logger = get_logger("django_dsched.outbox.relay")

# Under a backlog (two claims in a row came back full, with at least this many messages), the
# relay claims its next batch on a thread of its own while it sends the end of this one: the
# database claims while Python sends. Smaller batches are not worth a second session.
CLAIM_AHEAD_MIN = 100
# The claim ahead starts once what is left of the batch in hand would take no longer to send
# than this many times the last claim took: late enough that a send that hangs before the end
# of the batch holds no batch claimed ahead, and a message arriving meanwhile is not queued
# behind one; early enough that the claim is done when the batch is.
AHEAD_LEAD = 2.0

# Claims a batch on the calling thread's session: (limit, max_bytes, since) → the batch, and
# when its claim began (time.monotonic()).
Claim = Callable[[int, int, int | None], tuple[Claimed, float]]


class ClaimAhead:
    """One relay's claims ahead: whether to make one, the one running, its thread.

    ``claim`` claims a batch (on the thread it is called on); ``renew`` renews claims of a
    batch held past a heartbeat interval and returns the ids still held.
    """

    def __init__(
        self,
        claimer: Claimer,
        heartbeat: ClaimHeartbeat,
        using: str,
        claim: Claim,
        renew: Callable[[list[Message]], set[uuid.UUID]],
    ) -> None:
        self.claimer = claimer
        self.heartbeat = heartbeat
        self.using = using
        self._claim = claim
        self._renew = renew
        # Whether the batch in hand came from a full claim (a backlog): claim the next one
        # ahead, with at most this many bytes of payload (None: no).
        self.planned: int | None = None
        # The next batch's claim, running on the claim-ahead thread (with the limit it asked).
        self._ahead: tuple[Future[tuple[Claimed, float]], int] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._session = False  # whether the claim-ahead thread holds a session
        self._was_full = False  # whether the last claim came back full

    def plan(self, claimed: int, limit: int, in_hand: int, batch_bytes: int) -> None:
        """After a claim of ``limit`` that found ``claimed`` messages (``in_hand`` bytes of
        them to send): whether, and with how many bytes, to claim the next batch ahead."""
        # A full claim is a backlog: claim the next batch ahead, within what the byte cap
        # leaves of the batch in hand (the two batches share it).
        full = claimed >= max(limit, CLAIM_AHEAD_MIN)
        # Two full claims in a row: a steady stream delivered a batch at a time (1,000
        # fires a second, one batch each) has nothing to claim ahead.
        backlog, self._was_full = full and self._was_full, full
        self.planned = batch_bytes - in_hand if backlog and in_hand <= batch_bytes // 2 else None

    def idle(self) -> None:
        """A claim found nothing: no backlog to claim ahead of."""
        self._was_full = False
        self.close_session()

    def due(self, unsent: int, pace: Pace) -> bool:
        """Whether to claim ahead now, ``unsent`` messages of the batch in hand left to send."""
        left = unsent * pace.send_seconds
        return (
            self.planned is not None
            and pace.send_seconds > 0
            and left <= AHEAD_LEAD * pace.claim_seconds
        )

    def start(self, limit: int, since: int | None) -> None:
        """Start claiming the next batch on the claim-ahead thread (its own session), if one
        is :meth:`planned <plan>`."""
        max_bytes, self.planned = self.planned, None
        if max_bytes is None:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"dsched-claim-{self.claimer.relay_id}"
            )
        self._session = True
        self._ahead = (self._pool.submit(self._claim_here, limit, max_bytes, since), limit)

    def _claim_here(self, limit: int, max_bytes: int, since: int | None) -> tuple[Claimed, float]:
        # On the claim-ahead thread.
        try:
            return self._claim(limit, max_bytes, since)
        except BaseException:
            connections[self.using].close()  # a new session for the next claim ahead
            raise

    def take(self) -> tuple[Claimed, int] | None:
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
                self.claimer.relay_id,
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

    def close_session(self) -> None:
        """Close the claim-ahead thread's session (a relay with no backlog needs none)."""
        if self._pool is not None and self._session and self._ahead is None:
            self._session = False
            using = self.using
            self._pool.submit(lambda: connections[using].close())

    def end(self, give_back: Callable[[Claimed], None]) -> None:
        """Stopping: ``give_back`` a batch claimed ahead, close the thread's session."""
        try:
            ahead = self.take()
            if ahead is not None:
                give_back(ahead[0])
        except Error as exc:  # its claims expire after the visibility timeout
            logger.warning(
                "could not give back the batch claimed ahead (%s) relay=%s",
                first_line(exc),
                self.claimer.relay_id,
            )
        finally:
            if self._pool is not None:
                self.close_session()
                self._pool.shutdown(wait=False)
                self._pool = None
