"""Test settings for the schedule-health alert test: a long lease, so that a frozen owner's
buckets stay unfired long enough for the alert; fresh database gauges; the test handlers."""

from __future__ import annotations

from tests.integration.relay_settings import *  # noqa: F403

DSCHED_LEASE_SECONDS = 20.0
DSCHED_METRICS_CACHE_SECONDS = 0.5
