"""System checks. IDs are stable and documented in docs/reference.md.

Importing this package registers every check (the app's ``ready()`` does):

- ``database``: the database alias and vendor (E001, E002); prepared creates behind a pooler (W002)
- ``settings``: the scheduler's settings (E003 to E006); unknown ``DSCHED_*`` names (W005)
- ``buckets``: the bucket settings (E020 to E022); the cluster's stored bucket count (E023, W020)
- ``replication``: standbys that could lose fires across a failover (W030 to W032)
- ``delivery``: the relay's, retention's and transports' settings (E007 to E013); unserved
  topics (W003)
- ``declared``: schedules declared in code that the sync would refuse (W006)
- ``time_zones``: a host without tzdata (E014)
- ``rest``: the REST API without the apps it needs (E015, W004)
- ``partitions``: event store partitions without the exactly-once index (W040)
"""

from __future__ import annotations

from django_dsched.checks import (  # noqa: F401  (each module registers its checks)
    buckets,
    database,
    declared,
    delivery,
    partitions,
    replication,
    rest,
    settings,
    time_zones,
)
