from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    call_command("makemigrations", "dsched", check=True, dry_run=True, stdout=out)


@pytest.mark.django_db(transaction=True)
def test_migrations_reverse_and_reapply():
    call_command("migrate", "dsched", "zero", verbosity=0)
    call_command("migrate", "dsched", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_the_lease_rename_keeps_the_permissions_groups_held():
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    call_command("migrate", "dsched", "0007", verbosity=0)
    old_type, _ = ContentType.objects.get_or_create(app_label="dsched", model="schedulerlock")
    Permission.objects.filter(content_type__app_label="dsched", codename__endswith="lease").delete()
    held, _ = Permission.objects.get_or_create(
        content_type=old_type, codename="view_schedulerlock", defaults={"name": "x"}
    )
    group = Group.objects.create(name="operators")
    group.permissions.add(held)
    call_command("migrate", "dsched", verbosity=0)
    assert list(group.permissions.values_list("codename", flat=True)) == ["view_lease"]


@pytest.mark.django_db(transaction=True)
def test_reversing_0019_copies_the_events_payload_back_into_the_messages(settings):
    """Before the columns become NOT NULL again, a message that reads its payload from its
    event gets the event's copy (what a relay of an earlier release reads); one whose event
    is gone gets '{}' and, if pending, is dead-lettered, never delivered as an empty object."""
    from datetime import timedelta

    from django.db import connection, transaction

    from django_dsched.runtime.clock import database_now
    from django_dsched.scheduler.firing import Fence, fire_batch
    from django_dsched.scheduler.lease import LeaseHolder
    from tests.factories import ScheduleFactory
    from tests.helpers import sql

    settings.DSCHED_OUTBOX_PAYLOAD_ONCE = True
    start = database_now() - timedelta(seconds=1)
    for n in range(3):
        ScheduleFactory(start_ts=start, event_data={"n": n})
    lease = LeaseHolder(
        connection, lease_id=1, instance_id="t", lease_seconds=30, fast_failover=True
    )
    assert lease.try_acquire() and lease.epoch is not None
    with transaction.atomic(), connection.cursor() as cursor:
        assert fire_batch(cursor, Fence(1, "t", lease.epoch, 30.0), 100).fired == 3
    kept, delivered, orphan = [row[0] for row in sql("SELECT id FROM outbox_message_t ORDER BY id")]
    sql(
        "UPDATE outbox_message_t SET status = 'DELIVERED', delivered_ts = now() WHERE id = %s",
        [delivered],
    )
    sql("DELETE FROM event_store_t WHERE id = %s", [orphan])
    assert sql("SELECT count(*) FROM outbox_message_t WHERE payload IS NULL") == [(3,)]

    call_command("migrate", "dsched", "0018", verbosity=0)

    rows = sql(
        "SELECT o.id, o.payload = e.payload AND o.metadata = e.metadata, o.status"
        " FROM outbox_message_t o LEFT JOIN event_store_t e ON e.id = o.id"
    )
    assert sorted(rows) == sorted(
        [(kept, True, "PENDING"), (delivered, True, "DELIVERED"), (orphan, None, "DELIVERY_FAILED")]
    )
    ((payload, metadata, error),) = sql(
        "SELECT payload, metadata, last_error FROM outbox_message_t WHERE id = %s", [orphan]
    )
    assert (payload, metadata) in (({}, {}), ("{}", "{}"))
    assert "its event (the same id) was deleted" in error
    call_command("migrate", "dsched", verbosity=0)
