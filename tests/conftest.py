from __future__ import annotations

import os

import pytest

from tests import flush

# The brokers' servers are fixtures of the whole run, one server each, only here: a fixture
# imported into a test module is that module's own, so each module importing these started
# its own server (four RabbitMQs, five Redises and two motos a run).
from tests.brokers import rabbitmq_url, redis_url  # noqa: F401  (fixtures)
from tests.factories import ScheduleFactory  # noqa: F401  (handy in -k runs)
from tests.release import dists, installed_wheel  # noqa: F401  (fixtures: the built release)
from tests.sqs_server import sqs_client, sqs_endpoint  # noqa: F401  (fixtures)

# A transactional test's flush truncates only the tables written (tests/flush.py).
flush.install()

for name in list(os.environ):
    if name.startswith("DSCHED_") and name not in ("DSCHED_DATA_DIR", "DSCHED_TEST_DB_NAME"):
        del os.environ[name]


@pytest.fixture
def db_now():
    from django_dsched.runtime.clock import database_now

    return database_now


@pytest.fixture(autouse=True)
def _hosts_without_quota_unknown():
    """Each test starts with no host known to have no quota (changes/quotas.py): a test's
    first create of a host reads its quota, whatever ran before (tests/changes/test_quotas.py
    counts that read; the query counts of creates prime it with ``known_unlimited``)."""
    from django_dsched.changes import quotas

    quotas.forget()


@pytest.fixture
def known_unlimited(db):
    """The default host is known to have no quota: its creates read nothing more (tests
    that count a create's statements)."""
    from django_dsched.changes import quotas
    from django_dsched.conf import app_settings

    assert not quotas.may_apply(app_settings.DEFAULT_HOST_ID)


@pytest.fixture
def fence():
    """This session holds the lease (30 s): the fence its fires carry (``tests.fire_path.fire``)."""
    from django.db import connection

    from django_dsched.cluster.lease import LeaseHolder
    from django_dsched.firing.fence import Fence

    lease = LeaseHolder(
        connection, lease_id=1, instance_id="test", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire()
    assert lease.epoch is not None
    return Fence(1, "test", lease.epoch, 30.0)


@pytest.fixture
def unchecked():
    """``with unchecked(table):`` writes values ``table``'s range CHECK
    (``dsched_*_times_in_range``) refuses, as rows written before the CHECK was added (NOT
    VALID) hold them: the CHECK is dropped for the block and added again NOT VALID, so it
    refuses every new write of such a value but the rows written meanwhile stay. At the end
    of the test those rows are deleted and the CHECK validated again."""
    from contextlib import contextmanager

    from tests.helpers import sql

    dropped: dict[tuple[str, str], str] = {}

    @contextmanager
    def written_unchecked(table: str):
        found = sql(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = to_regclass(%s) AND conname LIKE 'dsched\\_%%times\\_in\\_range'",
            [table],
        )
        for name, definition in found:
            dropped[table, name] = definition.removesuffix(" NOT VALID")
            sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        try:
            yield
        finally:
            for name, _definition in found:
                sql(f"ALTER TABLE {table} ADD CONSTRAINT {name} {dropped[table, name]} NOT VALID")

    yield written_unchecked
    for (table, name), definition in dropped.items():
        condition = definition.removeprefix("CHECK ")
        sql(f"DELETE FROM {table} WHERE NOT {condition}")
        sql(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")
