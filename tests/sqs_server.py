"""A real SQS-compatible server for the SQS transport's tests: moto's server mode.

The fixture starts ``python -m moto.server`` (the ``moto[server]`` package of the test
dependency group) on a free localhost port, waits for it to listen (at most 30 s) and kills it
afterwards. When moto cannot be imported the tests skip loudly, except under CI=true, where
they fail, as for the other brokers (tests/brokers.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import free_port, port_open, stop
from tests.helpers import wait_for

REGION = "us-east-1"
# Credentials moto takes (it checks none); explicit, so no test reads the machine's own.
KEYS = {"ACCESS_KEY_ID": "testing", "SECRET_ACCESS_KEY": "testing"}


def require_moto() -> None:
    if importlib.util.find_spec("moto") and importlib.util.find_spec("flask"):
        return
    message = (
        "!! moto's server is not installed: pip install 'moto[server]' (the test dependency "
        "group has it) to run the SQS transport's tests"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI must not skip them)")
    print(message, file=sys.stderr)
    pytest.skip(message)


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """The URL of a running moto server (SQS and the rest of its services)."""
    require_moto()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dsched-moto-") as workdir:
        log_path = Path(workdir, "moto.log")
        log = log_path.open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: process.poll() is not None or port_open(port),
                timeout=30,
                what="moto's server to listen",
            )
            assert process.poll() is None, log_path.read_text()
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process, timeout=10)
            log.close()


@pytest.fixture(scope="session")
def sqs_client(sqs_endpoint: str) -> Iterator[object]:
    """A boto3 SQS client of the test's own, on the moto server."""
    import boto3

    client = boto3.session.Session(
        aws_access_key_id=KEYS["ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["SECRET_ACCESS_KEY"],
        region_name=REGION,
    ).client("sqs", endpoint_url=sqs_endpoint)
    yield client
    client.close()
