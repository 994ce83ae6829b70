"""The example project's settings with DSCHED_BUCKETS from the environment (bucket_bench)."""

from __future__ import annotations

import os

from example_project.settings import *  # noqa: F403

DSCHED_BUCKETS = int(os.environ.get("DSCHED_BUCKETS", "1"))
