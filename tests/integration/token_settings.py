"""Test settings for processes whose /metrics needs a bearer token."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

DSCHED_METRICS_TOKEN = "scrape-token-for-tests"
