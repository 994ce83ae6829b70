"""One idempotency key created at once by several processes: exactly one schedule.

The winner holds its transaction open until every other process waits on the key's unique
index (seen in pg_stat_activity), so each of them must then read the winner
(tests/test_api_keys.py races sessions in threads; here they are separate processes, as in
a deployment)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from django_dsched.models import Event, Schedule
from tests.helpers import sql, wait_for
from tests.integration.conftest import ROOT, database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROCESSES = 4
KEY = "payment-deadline:42"

SCRIPT = f"""
import sys
from datetime import timedelta

import django

django.setup()
from django.db import transaction

from django_dsched import api

print("ready", flush=True)
sys.stdin.readline()  # go: every process is up
with transaction.atomic():
    schedule = api.create_once(
        key={KEY!r}, delay=timedelta(minutes=30), topic="payments", event_type="payment.expire"
    )
    sys.stdin.readline()  # commit: every other process waits on the key
print(schedule.schedule_id, flush=True)
"""


def test_processes_creating_one_key_at_once_make_exactly_one_schedule() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    results: list[uuid.UUID] = []
    try:
        for process in processes:
            assert process.stdout is not None
            ready = process.stdout.readline()
            assert ready == "ready\n", ready + process.communicate(timeout=30)[1]
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        wait_for(
            lambda: (
                sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE %s",
                    ["%WITH c AS%"],
                )[0][0]
                == PROCESSES - 1
            ),
            timeout=30,
            what="every process but the winner waiting on the key",
        )
        for process in processes:  # the winner commits; the others read it
            assert process.stdin is not None
            process.stdin.write("commit\n")
            process.stdin.flush()
        for process in processes:
            output, errors = process.communicate(timeout=60)
            assert process.returncode == 0, errors
            results.append(uuid.UUID(output.split()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert len(results) == PROCESSES
    assert len(set(results)) == 1
    assert Schedule.objects.filter(idempotency_key=KEY).count() == 1
    assert Event.objects.filter(aggregate_id=results[0]).count() == 1  # one "created"
