"""Real run_scheduler processes against the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from tests.pgbouncer import pgbouncer  # noqa: F401  (a fixture for test_pgbouncer.py)

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The main DATABASE_URL, pointed at the test database."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


class Instance:
    """A management command (``run_scheduler`` unless told otherwise) in a subprocess."""

    def __init__(
        self,
        name: str,
        log_dir: Path,
        extra_args: list[str],
        command: str = "run_scheduler",
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                command,
                "--settings=tests.settings",
                f"--instance-id={name}",
                "-v",
                "2",
                *extra_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log_path.open("w"),
            stderr=subprocess.STDOUT,
        )

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


@pytest.fixture
def cluster(tmp_path, transactional_db):
    """Start instances with ``cluster.start(name)``; all are stopped after the test."""

    class Cluster:
        def __init__(self) -> None:
            self.instances: dict[str, Instance] = {}

        def start(
            self,
            name: str,
            *extra_args: str,
            command: str = "run_scheduler",
            env: dict[str, str] | None = None,
        ) -> Instance:
            instance = Instance(name, tmp_path, list(extra_args), command, env)
            self.instances[name] = instance
            return instance

        def logs(self) -> str:
            return "\n".join(f"--- {n}\n{i.log()}" for n, i in self.instances.items())

    started = Cluster()
    yield started
    for instance in started.instances.values():
        instance.stop()
