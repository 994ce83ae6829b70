"""The suite's flush (tests/flush.py) leaves what Django's leaves: every table empty, as a
TRUNCATE leaves it (no pages, no statistics), content types and permissions as post_migrate
writes them; and it writes nothing that is already so."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

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


def files() -> dict[int, int]:
    return dict(sql("SELECT oid, relfilenode FROM pg_class WHERE relkind = 'r'"))


def renewed(before: dict[int, int]) -> set[str]:
    """The tables given new files since ``before``."""
    after = files()
    return {
        name
        for (name,) in sql(
            "SELECT oid::regclass::text FROM pg_class WHERE oid = ANY(%s::oid[])",
            [[oid for oid, node in after.items() if before.get(oid) not in (None, node)]],
        )
    }


def content_types_and_permissions() -> list[tuple[str, str, str]]:
    return sorted(
        Permission.objects.values_list("content_type__app_label", "content_type__model", "codename")
    )


def test_a_flush_of_nothing_written_writes_nothing():
    flush()
    written = content_types_and_permissions()
    before = files()
    with CaptureQueriesContext(connection) as queries:
        flush()
    # Not even the content types and permissions: post_migrate, which would find them all as
    # it writes them, is not sent (its receivers ask some 40 queries). The flush's own: the
    # tables' names, its statement in a transaction, one read of what post_migrate writes.
    assert renewed(before) == set()
    assert len(queries) <= 5, [query["sql"][:60] for query in queries]
    assert content_types_and_permissions() == written


def test_a_flush_writes_back_the_content_types_and_permissions_a_test_changed():
    flush()
    written = content_types_and_permissions()
    Permission.objects.filter(codename="add_schedule").delete()
    ContentType.objects.filter(app_label="dsched", model="calendar").delete()  # its 4 too
    Permission.objects.filter(codename="view_schedule").update(name="renamed")
    before = files()
    flush()
    assert {"django_content_type", "auth_permission"} <= renewed(before)
    assert content_types_and_permissions() == written
    assert Permission.objects.get(codename="view_schedule").name == "Can view schedule"
    # And the next flush finds them as written.
    before = files()
    flush()
    assert renewed(before) == set()


def test_a_flush_without_post_migrate_empties_them_as_djangos_does():
    flush()
    # As a flush for serialized_rollback or available_apps (the next flush writes them back).
    call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True)
    assert not ContentType.objects.exists()
    assert not Permission.objects.exists()
