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
