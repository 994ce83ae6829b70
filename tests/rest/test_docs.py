"""docs/api.md's curl examples, run as written against a live server: each ```bash block
in turn, in one shell (so ``ID`` and ``ETAG`` carry over), must exit 0 and print JSON of
the shape of the ```json block that follows it (the same keys, the same kinds of values)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_dsched import api
from django_dsched.enums import DeliveryStatus
from django_dsched.models import Lease, OutboxMessage
from django_dsched.runtime.clock import database_now

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"```bash\n(.*?)```\s*(?:```json\n(.*?)```)?", re.DOTALL)
MARK = "@@block-done@@"


def blocks() -> list[tuple[str, str | None]]:
    return [(code, example) for code, example in BLOCK.findall(DOC.read_text())]


def stream(text: str) -> list[Any]:
    """The JSON values printed one after another."""
    decoder, values, index = json.JSONDecoder(), [], 0
    text = text.strip()
    while index < len(text):
        value, index = decoder.raw_decode(text, index)
        values.append(value)
        while index < len(text) and text[index].isspace():
            index += 1
    return values


def shape(value: Any) -> Any:
    """Keys and kinds of values, not the values (ids and times differ from run to run)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


@pytest.fixture
def tools() -> None:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if not missing:
        return
    message = f"the docs' examples need {', '.join(missing)} (apt-get install curl jq)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: not skipping)")
    pytest.skip("!! SKIPPED: " + message)


def test_the_curl_examples_run_and_print_what_the_docs_show(
    tools: None, live_server: Any, transactional_db: None, tmp_path: Path
) -> None:
    user = User.objects.create_superuser("reports-service", "r@example.com", "pw")
    token = Token.objects.create(user=user)
    # What the examples find besides what they make: a leader and a dead letter.
    Lease.objects.create(lease_id=1, instance_id="node-1", last_heartbeat=database_now())
    failing = api.create_interval("webhook", every=1, topic="hooks", event_type="sent")
    api.trigger(failing)
    OutboxMessage.objects.update(status=DeliveryStatus.DELIVERY_FAILED, attempts=10)

    found = blocks()
    assert len(found) >= 10 and all(example for _, example in found)
    script = "set -euo pipefail\n" + "".join(f"{code}\necho {MARK}\n" for code, _ in found)
    run = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={
            "PATH": os.environ["PATH"],
            "DSCHED_API": f"{live_server.url}/api/dsched",
            "TOKEN": token.key,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    outputs = run.stdout.split(MARK + "\n")
    done = len(outputs) - 1
    assert run.returncode == 0, (
        f"block {done + 1} failed ({run.returncode}):\n{found[done][0]}\n{run.stderr}"
    )
    assert done == len(found)
    for (code, example), output in zip(found, outputs, strict=False):
        assert example is not None
        printed = stream(output)
        assert [shape(v) for v in printed] == [shape(v) for v in stream(example)], (
            f"{code}\nprinted:\n{output}"
        )
