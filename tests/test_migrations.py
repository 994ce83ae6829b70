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
