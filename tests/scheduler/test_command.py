from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_dsched.models import Event
from tests.factories import ScheduleFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_once_fires_what_is_due_and_exits(db_now):
    ScheduleFactory.create_batch(3, start_ts=db_now() - timedelta(seconds=1))
    out = StringIO()
    call_command("run_scheduler", once=True, instance_id="cli", stdout=out, verbosity=1)
    assert "Fired 3 schedule(s)." in out.getvalue()
    assert Event.objects.filter(metadata__instance_id="cli").count() == 3


def test_max_iterations_bounds_the_loop():
    call_command("run_scheduler", max_iterations=2, poll_interval=0.05, verbosity=0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--batch-size", "0"],
        ["--batch-size", "lots"],
        ["--poll-interval", "-1"],
        ["--instance-id", ""],
        ["--once", "--max-iterations", "3"],
    ],
)
def test_bad_options_are_refused(argv):
    with pytest.raises(CommandError):
        call_command("run_scheduler", *argv, verbosity=0)
