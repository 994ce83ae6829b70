"""Real run_relay processes and runs longer than the visibility timeout (2 s here): the claim
heartbeat keeps a live run's claim, and a frozen relay loses its claim to another relay."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest

from django_dsched.enums import DeliveryStatus
from django_dsched.models import OutboxMessage
from tests.helpers import wait_for
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.integration

SETTINGS = "--settings=tests.integration.relay_settings"


@pytest.fixture
def run_log(tmp_path, monkeypatch):
    """Lines ("start" | "end", pid, message id) the long handler wrote."""
    path: Path = tmp_path / "runs.log"
    path.touch()
    monkeypatch.setenv("RELAY_TEST_LOG", str(path))

    def read() -> list[tuple[str, int, str]]:
        rows = []
        for line in path.read_text().splitlines():
            what, pid, id_ = line.split()
            rows.append((what, int(pid), id_))
        return rows

    return read


def test_a_run_longer_than_the_timeout_is_delivered_once(cluster, run_log, monkeypatch):
    monkeypatch.setenv("RELAY_TEST_LONG", "5")  # 2.5 visibility timeouts
    (id_,) = make_messages(1, topic="long")
    first = cluster.start("first", SETTINGS, command="run_relay")
    second = cluster.start("second", SETTINGS, command="run_relay")

    try:
        wait_for(
            lambda: OutboxMessage.objects.get(id=id_).status == DeliveryStatus.DELIVERED,
            timeout=60,
            what="the long run delivered",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    starts = [pid for what, pid, _ in run_log() if what == "start"]
    assert len(starts) == 1, cluster.logs()
    assert starts[0] in {first.process.pid, second.process.pid}
    row = OutboxMessage.objects.get(id=id_)
    assert row.attempts == 1
    assert row.completed_ts - row.started_ts >= timedelta(seconds=5)


def test_a_frozen_relay_loses_its_claim_and_another_delivers(cluster, run_log, monkeypatch):
    monkeypatch.setenv("RELAY_TEST_LONG", "3")
    (id_,) = make_messages(1, topic="long")
    frozen = cluster.start("frozen", SETTINGS, command="run_relay")
    wait_for(lambda: run_log(), timeout=30, what="the run to start")
    frozen.signal(signal.SIGSTOP)  # mid-run: no more heartbeats
    held_until = OutboxMessage.objects.get(id=id_).claimed_until
    rescuer = cluster.start("rescuer", SETTINGS, command="run_relay")

    try:
        wait_for(
            lambda: OutboxMessage.objects.get(id=id_).status == DeliveryStatus.DELIVERED,
            timeout=60,
            what="the other relay to deliver it",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    log = run_log()
    assert [(what, pid) for what, pid, _ in log] == [
        ("start", frozen.process.pid),
        ("start", rescuer.process.pid),
        ("end", rescuer.process.pid),
    ], cluster.logs()
    row = OutboxMessage.objects.get(id=id_)
    assert row.attempts == 2 and row.picked_ts >= held_until  # only after the claim expired

    # Woken up, the frozen relay finishes its run but records nothing: its claim is gone.
    frozen.signal(signal.SIGCONT)
    wait_for(lambda: "not recorded" in frozen.log(), timeout=30, what="the stale outcome")
    after = OutboxMessage.objects.get(id=id_)
    assert (after.status, after.attempts, after.completed_ts) == (
        DeliveryStatus.DELIVERED,
        2,
        row.completed_ts,
    )
