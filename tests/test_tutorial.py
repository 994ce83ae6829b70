"""docs/tutorial.md, followed by a machine.

A new project made by a real ``startproject`` (``python -m django`` is ``django-admin``),
the app from ``startapp``, then the tutorial's Python blocks whose first line names a file
(``# core/dsched_schedules.py (new file)``, ``# mysite/settings.py (add at the end)``),
applied in order. Only the database differs: the test appends a ``DATABASES`` for the
suite's test database to the settings. Then the tutorial's commands as subprocesses:
``migrate`` (which creates the declared schedule), ``check --database``, ``dsched list``,
``run_scheduler --with-relay`` (the declared function runs: it deletes an expired session
put there by the test), and the tutorial's ``pycon`` blocks as doctests in ``manage.py
shell``: the delayed message is created, then (once the handler has run) delivered. While
it waits, a superuser made in the shell gets the admin's schedule list through Django's
test client. Every command of the tutorial's shell blocks is one this test runs or
one it names as left out, so a command added to the page fails here until it is accounted
for.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone

from django_dsched import api
from django_dsched.models import OutboxMessage
from tests.helpers import wait_for
from tests.integration.stopping import kill_running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
FILE_MARK = re.compile(
    r"# (?P<path>[\w/.]+) \((?P<how>new file|add at the end|replace the DATABASES setting)\)"
)

# The commands of the tutorial's shell blocks that this test runs...
RUN = [
    "django-admin startproject mysite",
    "python manage.py startapp core",
    "python manage.py migrate",
    "python manage.py check --database default",
    "python manage.py dsched list",
    "python manage.py run_scheduler --with-relay",
]
# ... and those it leaves out, with the reason.
LEFT_OUT = {
    "python -m venv .venv": "the suite's virtualenv has the package",
    "source .venv/bin/activate": "the suite's virtualenv has the package",
    "pip install django-dsched": "the wheel built from the checkout is installed on PYTHONPATH",
    "cd mysite": "the commands run in the project's directory",
    "createuser --pwprompt mysite": "the project uses the suite's test database",
    "createdb --owner mysite mysite": "the project uses the suite's test database",
    "python manage.py createsuperuser": "interactive: the test makes one in the shell",
    "python manage.py runserver": "the admin is requested through Django's test client",
}

# A shell started ahead of its turn waits for the test's "go" on its stdin: its Python and
# Django start while the test waits for what must come before it.
DOCTEST = """
import sys
if sys.stdin.readline() != "go\\n":
    raise SystemExit("not told to go: the test failed before this shell's turn")
import doctest
text = open({path!r}).read()
test = doctest.DocTestParser().get_doctest(text, {{}}, {name!r}, {path!r}, 0)
runner = doctest.DocTestRunner()
runner.run(test)
raise SystemExit(1 if runner.failures else 0)
"""

ADMIN = """
from django.contrib.auth import get_user_model
from django.test import Client
client = Client(HTTP_HOST="127.0.0.1")  # runserver's address (DEBUG on, no ALLOWED_HOSTS)
client.force_login(get_user_model().objects.create_superuser("admin", "", "not-a-secret"))
page = client.get("/admin/dsched/schedule/")
assert page.status_code == 200, page.status_code
assert b"clear-expired-sessions" in page.content and b"welcome:42" in page.content
print("admin ok")
"""


def blocks(lang: str) -> list[str]:
    text = TUTORIAL.read_text()
    return [m["body"] for m in BLOCK.finditer(text) if m["lang"] == lang]


def shell_commands() -> list[str]:
    return [
        line.split("#")[0].strip()
        for body in blocks("bash")
        for line in body.splitlines()
        if line.split("#")[0].strip()
    ]


def test_every_command_of_the_tutorial_is_run_or_accounted_for():
    assert sorted(shell_commands()) == sorted([*RUN, *LEFT_OUT])


def test_every_python_block_of_the_tutorial_names_its_file():
    for body in blocks("python"):
        assert FILE_MARK.fullmatch(body.splitlines()[0]), body


@pytest.fixture
def started():
    """The processes a test starts (it appends them); those still running when it ends (it
    failed before their turn) are killed."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    kill_running(*processes)


def test_the_tutorial_runs(transactional_db, tmp_path, installed_wheel, started):
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}
    # django-dsched from the built wheel, never from this source tree.
    env.update(PYTHONPATH=str(installed_wheel), PYTHONUNBUFFERED="1")

    def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    def finish(process: subprocess.Popen[str], say: str | None = None) -> str:
        """What ``process`` printed, once it has exited (after reading ``say`` on its stdin)."""
        stdout, stderr = process.communicate(say, timeout=120)
        assert process.returncode == 0, f"{process.args}\n{stdout}\n{stderr}"
        return stdout

    def run(*args: str, cwd: Path) -> str:
        return finish(start(*args, cwd=cwd))

    project = tmp_path / "mysite"

    def shell_doctest(block: str, path: Path) -> subprocess.Popen[str]:
        """``manage.py shell`` started, to run ``block`` as a doctest once told to go."""
        path.write_text(block)
        code = DOCTEST.format(path=str(path), name=path.name)
        return start("manage.py", "shell", "-c", code, cwd=project)

    run("-m", "django", "startproject", "mysite", cwd=tmp_path)
    run("manage.py", "startapp", "core", cwd=project)
    for body in blocks("python"):
        mark = FILE_MARK.fullmatch(body.splitlines()[0])
        assert mark is not None
        path = project / mark["path"]
        if mark["how"] == "new file":
            assert not path.exists(), path
            path.write_text(body)
        else:  # appended: a later assignment replaces the earlier one
            path.write_text(path.read_text() + "\n" + body)
    database = {
        key: connection.settings_dict[key]
        for key in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    }
    settings = project / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text() + f"\n# The test's database\nDATABASES = {{'default': {database!r}}}\n"
    )

    migrated = run("manage.py", "migrate", cwd=project)
    assert "django-dsched: 1 created, 0 updated, 0 deactivated" in migrated
    # Both read what migrate wrote, and only read: side by side.
    checking = start("manage.py", "check", "--database", "default", cwd=project)
    listing = start("manage.py", "dsched", "list", cwd=project)
    assert "System check identified no issues" in finish(checking)
    assert re.search(r"clear-expired-sessions +ACTIVE", finish(listing))

    Session.objects.create(
        session_key="expired", session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
    log = tmp_path / "run_scheduler.log"
    scheduler = subprocess.Popen(
        [sys.executable, "manage.py", "run_scheduler", "--with-relay"],
        cwd=project,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        first, second = blocks("pycon")
        shell_0 = shell_doctest(first, tmp_path / "shell-0.txt")
        wait_for(
            lambda: "deleted 1 expired session(s)" in log.read_text(),
            timeout=60,
            what="the declared function to run",
        )
        assert not Session.objects.filter(session_key="expired").exists()

        finish(shell_0, "go\n")
        # While the delayed message waits for its time: the admin's schedule list (and the
        # next shell's start).
        shell_1 = shell_doctest(second, tmp_path / "shell-1.txt")
        assert "admin ok" in run("manage.py", "shell", "-c", textwrap.dedent(ADMIN), cwd=project)
        wait_for(
            lambda: api.status(key="welcome:42").message_status == "DELIVERED",
            timeout=60,
            what="the delayed message to be delivered",
        )
        assert "welcome mail for user 42 (message " in log.read_text()
        finish(shell_1, "go\n")
    finally:
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(20)
    output = log.read_text()
    assert scheduler.returncode == 0, output
    assert "released leadership" in output
    assert not OutboxMessage.objects.exclude(status="DELIVERED").exists(), output
