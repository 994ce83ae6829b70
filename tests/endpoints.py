"""Test helpers for the HTTP endpoints of the loops: GETs, a database proxy that can be
cut, and a real Prometheus server (their ports: tests.brokers.free_port)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import free_port


def get(
    port: int, path: str, timeout: float = 5.0, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """(status, body) of ``GET http://127.0.0.1:port/path``; (0, error) if nothing answers."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


class DatabaseProxy:
    """A TCP port forwarding to PostgreSQL's Unix socket. ``cut()`` drops every connection
    and refuses new ones (closes them at once) until ``restore()``: the database is
    unreachable for whoever connects through it."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.open = True
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.socket_path)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for end in sockets:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


def prometheus_binary(name: str = "prometheus") -> str:
    """Debian's ``prometheus`` (or ``promtool``, from the same package); skips without it,
    except under CI=true where it fails."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (apt-get install prometheus; scripts/test.sh does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


class Prometheus:
    """A real Prometheus server scraping ``targets`` (host:port) every second, and
    ``token_targets`` with ``Authorization: Bearer <token>``; evaluating ``rule_files``
    every second."""

    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        *,
        token_targets: list[str] | None = None,
        token: str = "",
        rule_files: list[Path] | None = None,
    ) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        jobs = (
            f"  - job_name: dsched\n    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )
        if token_targets:
            jobs += (
                "  - job_name: dsched-token\n"
                f"    authorization: {{credentials: {json.dumps(token)}}}\n"
                "    static_configs:\n"
                f"      - targets: {json.dumps(token_targets)}\n"
            )
        rules = "".join(f"  - {json.dumps(str(path))}\n" for path in rule_files or [])
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n"
            + jobs
        )
        self.log_path = workdir / "prometheus.log"
        self.process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log_path.open("w"),
            stderr=subprocess.STDOUT,
        )

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The result of an instant query (an empty list if there is none yet)."""
        status, body = get(
            self.port, "/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        )
        if status != 200:
            return []
        answer = json.loads(body)
        return answer["data"]["result"] if answer.get("status") == "success" else []

    def firing(self) -> set[str]:
        """The names of the alerts firing now."""
        found = self.query('ALERTS{alertstate="firing"}')
        return {r["metric"]["alertname"] for r in found}

    def targets_up(self) -> int:
        return sum(float(r["value"][1]) == 1 for r in self.query("up"))

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
