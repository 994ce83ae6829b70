"""Stopping several subprocesses at once (tests/integration/test_health_alerts.py and
tests/outbox/test_celery_worker.py): what ``Instance.stop()`` does to each, but each is
signalled before any is waited for, so that their graceful stops overlap instead of adding
up."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable

from tests.integration.conftest import Instance


def stop_together(instances: Iterable[Instance], timeout: float = 10) -> None:
    """SIGCONT (a frozen one resumes) and SIGTERM to each instance still running, then wait
    for them all, killing those still running ``timeout`` seconds later. Each gets one
    SIGTERM: a second one makes run_scheduler and run_relay exit at once, so whatever stops
    them afterwards (``Instance.stop()``, the ``cluster`` fixture) finds them stopped."""
    running = [instance for instance in instances if instance.process.poll() is None]
    for instance in running:
        instance.signal(signal.SIGCONT)
        instance.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for instance in running:
        try:
            instance.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            instance.process.kill()
            instance.process.wait(5)
