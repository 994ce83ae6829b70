"""Real message brokers for the transport tests: redis-server and rabbitmq-server.

Each fixture starts its own server on a free localhost port in a temporary directory and
stops it afterwards. The servers come from Debian packages (scripts/test.sh installs them).
When a server binary is missing the tests skip loudly, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import wait_for

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def free_port() -> int:
    """A free localhost port below the kernel's ephemeral range. Tests pick a port before
    anything listens on it, and clients (the processes under test, the waits for a server
    to come up) may try it meanwhile: a port of the ephemeral range can be taken by any
    outgoing connection as its own local port, even by one connecting to it (it then
    connects to itself), and the server or proxy meant for it fails with EADDRINUSE."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found below {low}")


def require(binary: str, package: str) -> str:
    found = shutil.which(binary) or (binary if os.access(binary, os.X_OK) else None)
    if found:
        return found
    message = (
        f"!! {binary} not found: install the Debian package {package} "
        "(scripts/test.sh does) to run the tests that need it"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must not skip them)")
    print(message, file=sys.stderr)
    pytest.skip(message)


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        return False
    return True


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    binary = require("redis-server", "redis-server")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dsched-redis-") as workdir:
        log = Path(workdir, "redis.log").open("w")  # noqa: SIM115  (closed in finally)
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: process.poll() is not None or port_open(port),
                timeout=20,
                what="redis-server to listen",
            )
            assert process.poll() is None, Path(workdir, "redis.log").read_text()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop(process)
            log.close()


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    binary = require(RABBITMQ_SERVER, "rabbitmq-server")
    port, dist_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="dsched-rabbitmq-") as workdir:
        base = Path(workdir)
        (base / "home").mkdir()
        (base / "enabled_plugins").write_text("[].\n")
        env = {
            **os.environ,
            "HOME": str(base / "home"),  # its own Erlang cookie
            "RABBITMQ_NODENAME": f"dsched-test-{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        log = (base / "rabbitmq.out").open("w")
        process = subprocess.Popen(
            [binary],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: process.poll() is not None or port_open(port),
                timeout=90,
                what="rabbitmq-server to listen",
            )
            assert process.poll() is None, (base / "rabbitmq.out").read_text()
            yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        finally:
            stop(process, timeout=30)
            log.close()
            time.sleep(0)  # let the log file handle go before the directory is removed
