"""What the fire-path tests share: a held lease's fence (``tests.fire_path.fire`` fires)."""

from __future__ import annotations

import pytest
from django.db import connection

from django_dsched.scheduler.firing import Fence
from django_dsched.scheduler.lease import LeaseHolder


@pytest.fixture
def fence() -> Fence:
    """This session holds the lease (30 s): the fence its fires carry."""
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="test", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    assert lease.epoch is not None
    return Fence(1, "test", lease.epoch, 30.0)
