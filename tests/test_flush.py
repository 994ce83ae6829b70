"""The suite's flush (tests/flush.py) leaves what Django's leaves: every table empty, as a
TRUNCATE leaves it (no pages, no statistics), content types and permissions as post_migrate
writes them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from tests.factories import ScheduleFactory
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)


def flush() -> None:
    # As pytest-django's transactional_db flushes after each test.
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)


def left(table: str) -> tuple[int, float]:
    """The pages and the row estimate of a table (``-1``: never counted, as after TRUNCATE)."""
    ((pages, estimate),) = sql(
        "SELECT relpages, reltuples FROM pg_class WHERE oid = %s::regclass", [table]
    )
    return pages, estimate


def leaves(table: str) -> list[str]:
    return [
        name
        for (name,) in sql(
            "SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) WHERE isleaf",
            [table],
        )
    ]


def test_a_flush_empties_what_was_written_and_forgets_what_was_counted():
    ScheduleFactory()
    kind = ContentType.objects.create(app_label="flushed", model="ghost")
    Permission.objects.create(codename="ghost_power", name="ghost", content_type=kind)
    partitions = leaves("outbox_message_t")
    assert len(partitions) > 1
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE outbox_message_t")  # every (empty) day partition counted
        cursor.execute("ANALYZE schedule_t")
    assert all(left(name)[1] == 0 for name in partitions)

    flush()

    assert sql("SELECT count(*) FROM schedule_t") == [(0,)]
    assert left("schedule_t") == (0, -1)
    assert all(left(name) == (0, -1) for name in partitions)
    assert not ContentType.objects.filter(app_label="flushed").exists()
    assert not Permission.objects.filter(codename="ghost_power").exists()
    assert Permission.objects.filter(codename="add_schedule").exists()  # post_migrate's


def test_a_flush_of_nothing_written_truncates_nothing():
    flush()
    before = dict(sql("SELECT oid, relfilenode FROM pg_class WHERE relkind = 'r'"))
    flush()
    after = dict(sql("SELECT oid, relfilenode FROM pg_class WHERE relkind = 'r'"))
    # Only what post_migrate wrote back again (content types and permissions, and the tables
    # that refer to them) has new files.
    changed = {
        name
        for (name,) in sql(
            "SELECT oid::regclass::text FROM pg_class WHERE oid = ANY(%s::oid[])",
            [[oid for oid, node in after.items() if before.get(oid) not in (None, node)]],
        )
    }
    assert "schedule_t" not in changed and "outbox_message_t" not in changed
    assert not any(name in changed for name in leaves("outbox_message_t")), changed
