"""The demo's in-process handlers: the relay runs them for every message of these topics."""

from __future__ import annotations

import logging

from django_dsched.handlers import handler

logger = logging.getLogger("django_dsched.demo")


def log_event(event: dict) -> None:
    logger.info(
        "handled %s for slot %s (message %s)", event["type"], event["scheduledtime"], event["id"]
    )


for topic in ("ops", "metrics", "billing"):
    handler(topic=topic)(log_event)
