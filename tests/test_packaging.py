"""The release: the sdist and the wheel pass `twine check`, carry what a project needs and
nothing half-shipped, the package page's links and images work from anywhere, and the
installed wheel (not this source tree) migrates and fires in a new project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import wait_for
from tests.integration.stopping import kill_running

ROOT = Path(__file__).resolve().parent.parent
PYPI_README = ROOT / "pypi.md"

pytestmark = pytest.mark.integration


def test_the_metadata_passes_twine_and_offers_the_runtime_extras_only(dists):
    """Users see the runtime extras only: what working on django-dsched needs is in
    pyproject.toml's dependency groups, which are not part of a release's metadata."""
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists.values())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    with zipfile.ZipFile(dists["wheel"]) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = wheel.read(name).decode()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.MULTILINE))
    runtime = {"redis", "rabbitmq", "webhooks", "tasks", "celery", "sqs", "api", "metrics"}
    assert extras == runtime | {"example"}
    urls = dict(re.findall(r"^Project-URL: ([^,]+), (\S+)$", metadata, re.MULTILINE))
    [site_url] = re.findall(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert urls["Documentation"] == site_url


def test_the_wheel_carries_migrations_templates_static_and_types(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = wheel.namelist()
    assert "django_dsched/migrations/0001_initial.py" in names
    assert "django_dsched/py.typed" in names
    assert any(n.startswith("django_dsched/templates/admin/dsched/") for n in names)
    assert any(n.startswith("django_dsched/static/dsched/") for n in names)
    assert "django_dsched/contrib/celery/migrations/0001_initial.py" in names
    assert "django_dsched/monitoring/prometheus-alerts.yml" in names
    assert "django_dsched/monitoring/grafana-dashboard.json" in names
    assert not any(n.startswith(("tests/", "bench/", "example_project/")) for n in names)


def test_the_sdist_ships_the_package_and_no_half_test_suite(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = sdist.getnames()
    top = names[0].split("/")[0]
    shipped = {n.removeprefix(f"{top}/") for n in names}
    assert {"pyproject.toml", "pypi.md", "LICENSE", "django_dsched/api.py"} <= shipped
    assert not any(n.startswith(("tests/", "bench/", "example_project/")) for n in shipped)


def test_the_package_page_links_and_images_are_absolute():
    text = PYPI_README.read_text()
    targets = re.findall(r"\]\(([^)]+)\)", text)
    assert targets
    assert all(t.startswith("https://") for t in targets), targets
    assert "scripts/" not in text  # nothing that only a clone of the repository has


def test_the_installed_wheel_migrates_and_fires_in_a_new_project(
    installed_wheel, tmp_path, transactional_db
):
    """Installed in a directory of its own (its dependencies come from this environment),
    imported from there and not from this source tree."""
    site = installed_wheel
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(project)],
        check=True,
        timeout=60,
    )
    settings = project / "mysite" / "settings.py"
    keys = ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    test_db = {key: connection.settings_dict[key] for key in keys}
    settings.write_text(
        settings.read_text()
        + textwrap.dedent(
            f"""
            INSTALLED_APPS += ["django.contrib.postgres", "django_dsched", "jobs"]
            USE_TZ = True
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", **{test_db!r}}}}}
            """
        )
    )
    jobs = project / "jobs"
    jobs.mkdir()
    (jobs / "__init__.py").write_text("")
    ran = tmp_path / "ran.txt"
    (jobs / "dsched_schedules.py").write_text(
        textwrap.dedent(
            f"""
            from django_dsched.declared import periodic


            @periodic("from-the-wheel", every=1, unit="SECONDS", topic="wheel")
            def tick(event):
                with open({str(ran)!r}, "a") as out:
                    out.write(event["id"] + "\\n")
            """
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(project)]),
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
    }
    env.pop("DATABASE_URL", None)

    def manage(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import django_dsched; print(django_dsched.__file__)"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr
    migrated = manage("migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    # The check and the scheduler both start once migrate is done, side by side: neither
    # waits for the other's Python start.
    checking = subprocess.Popen(
        [sys.executable, "-m", "django", "check", "--database", "default"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Fire what is due and run the function, until the schedule has fired twice.
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "django", "run_scheduler", "--with-relay", "-v", "0"],
        cwd=project,
        env=env,
    )
    try:
        wait_for(
            lambda: ran.exists() and len(ran.read_text().split()) >= 2,
            timeout=30,
            what="the declared function, run from the installed wheel",
        )
        checked, _ = checking.communicate(timeout=120)
        assert checking.returncode == 0, checked
    finally:
        kill_running(checking)  # the test failed before the check ended
        scheduler.terminate()
        scheduler.wait(30)
