"""Stopping several instances at once: each is sent what ``Instance.stop()`` sends before
any is waited for, so that their graceful stops overlap instead of adding up; and a command
started in the background, waited for (:func:`finished`)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable

from tests.integration.conftest import Instance


def terminate(*instances: Instance) -> None:
    """SIGCONT (a frozen one resumes) and SIGTERM, as ``Instance.stop()`` sends them, without
    waiting. Collect the exit codes with :func:`exit_code`, never with ``stop()``: a second
    SIGTERM makes run_scheduler and run_relay exit at once (exit code -15)."""
    for instance in instances:
        instance.signal(signal.SIGCONT)
        instance.signal(signal.SIGTERM)


def exit_code(instance: Instance, timeout: float = 10) -> int:
    """The exit code of an instance sent :func:`terminate`, waited for as ``stop()`` waits
    (killed if it hangs: not 0)."""
    try:
        return instance.process.wait(timeout)
    except subprocess.TimeoutExpired:
        instance.process.kill()
        return instance.process.wait(5)


def stop_together(instances: Iterable[Instance], timeout: float = 10) -> None:
    """:func:`terminate` each instance still running, then wait for them all, killing those
    still running ``timeout`` seconds later; whatever stops them afterwards
    (``Instance.stop()``, the ``cluster`` fixture) finds them stopped."""
    running = [instance for instance in instances if instance.process.poll() is None]
    terminate(*running)
    deadline = time.monotonic() + timeout
    for instance in running:
        exit_code(instance, max(0.0, deadline - time.monotonic()))


def finished(
    process: subprocess.Popen[str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """What ``process`` (started with its output piped) said and its exit status, once it has
    exited (killed after ``timeout`` seconds)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def kill_running(*processes: subprocess.Popen[str]) -> None:
    """Kill those of ``processes`` still running (a test failed before they ended) and
    collect them."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()
