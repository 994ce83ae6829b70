"""Test settings for relay subprocesses: a recording handler and short timeouts."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

DSCHED_HANDLER_MODULES = ["tests.integration.relay_handlers"]
DSCHED_RELAY_VISIBILITY_TIMEOUT = 2.0
DSCHED_RELAY_POLL_INTERVAL = 0.5
DSCHED_RELAY_RETRY_BASE = 0.2
DSCHED_RELAY_RETRY_MAX = 1.0
