"""Process plumbing shared by the long-running commands: signals, logging, a relay thread."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from django_dsched.conf import app_settings
from django_dsched.outbox.relay import Relay

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Stoppable(Protocol):
    @property
    def stopping(self) -> threading.Event: ...

    def stop(self) -> None: ...


@contextmanager
def stop_on_signals(loop: Stoppable) -> Iterator[None]:
    """SIGTERM/SIGINT stop the loop gracefully; a second one exits at once."""
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: Any) -> None:
        if loop.stopping.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        loop.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def relay_thread(relay: Relay) -> Iterator[None]:
    """Run ``relay`` on a thread (its own database connection) while the block runs."""

    def run() -> None:
        try:
            relay.run()
        except Exception:
            logging.getLogger("django_dsched.outbox.relay").exception(
                "the in-process relay crashed"
            )

    thread = threading.Thread(target=run, name="dsched-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        relay.stop()
        thread.join(app_settings.RELAY_VISIBILITY_TIMEOUT)


def configure_logging(verbosity: int) -> None:
    """Map --verbosity onto the package logger; add a handler only if none is configured."""
    logger = logging.getLogger("django_dsched")
    logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
