"""A handler for relay subprocesses: appends "pid id start_ns end_ns" to $RELAY_TEST_LOG."""

from __future__ import annotations

import os
import time

from django_dsched.handlers import handler


@handler(topic="reports")
def record(event: dict) -> None:
    start = time.monotonic_ns()
    time.sleep(float(os.environ.get("RELAY_TEST_DELAY", "0.02")))  # a sink that takes a while
    with open(os.environ["RELAY_TEST_LOG"], "a") as log:
        log.write(f"{os.getpid()} {event['id']} {start} {time.monotonic_ns()}\n")


@handler(topic="long")
def long_job(event: dict) -> None:
    """A run longer than the visibility timeout: logs "start pid id", sleeps, "end pid id"."""
    with open(os.environ["RELAY_TEST_LOG"], "a") as log:
        log.write(f"start {os.getpid()} {event['id']}\n")
    time.sleep(float(os.environ.get("RELAY_TEST_LONG", "5")))
    with open(os.environ["RELAY_TEST_LOG"], "a") as log:
        log.write(f"end {os.getpid()} {event['id']}\n")


@handler(topic="broken")
def always_fails(event: dict) -> None:
    """A handler whose work fails every time (schedule health: FAILING)."""
    raise RuntimeError("the report server is down")
