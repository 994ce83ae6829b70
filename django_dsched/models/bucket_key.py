"""A schedule's bucket key: which bucket of the cluster fires it (cluster/buckets.py)."""

from __future__ import annotations

from django.db import models
from django.db.models import Func

# Bits of Schedule.bucket_key: DSCHED_BUCKETS is at most 2**BUCKET_KEY_BITS (cluster/buckets.py).
BUCKET_KEY_BITS = 15


class BucketKey(Func):
    """The bucket key of a schedule id: its last two bytes (random in UUIDv4 and UUIDv7
    alike), kept to BUCKET_KEY_BITS bits. Immutable, so a stored generated column can use it."""

    template = (
        "((get_byte(uuid_send(%(expressions)s), 14) * 256"
        " + get_byte(uuid_send(%(expressions)s), 15))"
        f" & {(1 << BUCKET_KEY_BITS) - 1})"
    )
    output_field = models.SmallIntegerField()
