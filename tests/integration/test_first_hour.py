"""The README's Quick start, as a new user follows it: an app's dsched_schedules.py declares
a @periodic function, `migrate` creates the schedule, `run_scheduler --with-relay` fires it
and the function runs (before, the relay never imported dsched_schedules: every fire failed
with "no handler is registered" until dead-lettered)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from django_dsched.models import OutboxMessage, Schedule
from tests.helpers import wait_for
from tests.integration.conftest import ROOT, database_url

pytestmark = pytest.mark.integration


def test_a_declared_function_runs_following_the_quick_start(cluster, tmp_path):
    ran = tmp_path / "ran.txt"
    app = tmp_path / "cleanupapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "dsched_schedules.py").write_text(
        textwrap.dedent(
            f"""
            from django_dsched.declared import periodic


            @periodic("cleanup", every=1, unit="SECONDS", topic="cleanup")
            def cleanup(event):
                with open({str(ran)!r}, "a") as out:
                    out.write(event["id"] + "\\n")
            """
        )
    )
    (tmp_path / "first_settings.py").write_text(
        "from tests.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'cleanupapp']\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "DJANGO_SETTINGS_MODULE": "first_settings"}
    migrate = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--settings=first_settings", "-v", "0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    assert Schedule.objects.filter(schedule_name="cleanup").exists()
    cluster.start("solo", "--with-relay", "--settings=first_settings", env=env)
    wait_for(
        lambda: ran.exists() and len(ran.read_text().split()) >= 2,
        timeout=20,
        what="the declared function to run",
    )
    assert not OutboxMessage.objects.filter(last_error__contains="no handler").exists()
