"""Real run_relay processes: SIGKILL mid-batch loses nothing; two relays never share a claim."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict

import pytest

from django_dsched.enums import DeliveryStatus, FrequencyUnit
from django_dsched.models import OutboxMessage
from django_dsched.outbox.relay import HELD_BATCHES
from tests.factories import ScheduleFactory
from tests.helpers import sql, wait_for
from tests.outbox_helpers import make_messages

pytestmark = pytest.mark.integration

SETTINGS = "--settings=tests.integration.relay_settings"
BATCH = 10


@pytest.fixture
def delivery_log(tmp_path, monkeypatch):
    path = tmp_path / "deliveries.log"
    path.touch()
    monkeypatch.setenv("RELAY_TEST_LOG", str(path))

    def read() -> list[tuple[int, str, int, int]]:
        rows = []
        for line in path.read_text().splitlines():
            pid, id_, start, end = line.split()
            rows.append((int(pid), id_, int(start), int(end)))
        return rows

    return read


def all_delivered() -> bool:
    return not OutboxMessage.objects.exclude(status=DeliveryStatus.DELIVERED).exists()


def start_relay(cluster, name: str, *args: str):
    relay = cluster.start(name, SETTINGS, f"--batch-size={BATCH}", *args, command="run_relay")
    return relay


def test_sigkill_mid_batch_loses_nothing(cluster, delivery_log):
    ids = {str(i) for i in make_messages(100)}
    victim = start_relay(cluster, "victim")
    wait_for(lambda: len(delivery_log()) >= 25, timeout=30, what="the victim to deliver 25")
    victim.signal(signal.SIGKILL)
    victim.process.wait(10)
    killed_pid = victim.process.pid
    start_relay(cluster, "rescuer")

    wait_for(all_delivered, timeout=60, what="every message delivered")

    log = delivery_log()
    counts = Counter(id_ for _, id_, _, _ in log)
    assert set(counts) == ids, "a message was never delivered"
    duplicates = {id_ for id_, n in counts.items() if n > 1}
    # At least once: only what the victim sent and had not recorded comes twice; a relay
    # holds at most HELD_BATCHES batches (the one it sends and those claimed meanwhile).
    held = HELD_BATCHES * BATCH
    assert len(duplicates) <= held, cluster.logs()
    by_id = defaultdict(list)
    for pid, id_, _, _ in log:
        by_id[id_].append(pid)
    for id_ in duplicates:
        assert by_id[id_][0] == killed_pid and len(by_id[id_]) == 2
    assert all(n <= 2 for n in counts.values())
    # The victim's claims were taken over after the visibility timeout.
    retried = sql("SELECT count(*) FROM outbox_message_t WHERE attempts = 2")[0][0]
    assert len(duplicates) <= retried <= held


def test_two_relays_never_deliver_the_same_message(cluster, delivery_log, monkeypatch):
    monkeypatch.setenv("RELAY_TEST_DELAY", "0.002")
    first = start_relay(cluster, "first")
    second = start_relay(cluster, "second")
    for relay in (first, second):
        wait_for(lambda r=relay: "relay starting" in r.log(), timeout=30, what="relays up")
    ids = {str(i) for i in make_messages(300)}
    sql("SELECT pg_notify('dsched_outbox', '')")  # as a fire does: wake both at once

    wait_for(all_delivered, timeout=60, what="every message delivered")

    log = delivery_log()
    assert Counter(id_ for _, id_, _, _ in log) == Counter(ids), cluster.logs()  # once each
    pids = {pid for pid, _, _, _ in log}
    assert pids == {first.process.pid, second.process.pid}, "both relays should take a share"
    assert sql("SELECT max(attempts) FROM outbox_message_t")[0][0] == 1


def test_scheduler_with_relay_delivers_what_it_fires(cluster, delivery_log):
    ScheduleFactory(frequency_unit=FrequencyUnit.SECONDS, frequency_time=1, event_topic="reports")
    cluster.start("solo", SETTINGS, "--with-relay")

    try:
        wait_for(lambda: len(delivery_log()) >= 3, timeout=30, what="three fires delivered")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    lags = sql(
        "SELECT extract(epoch FROM delivered_ts - event_ts) FROM outbox_message_t"
        " WHERE status = 'DELIVERED'"
    )
    assert lags and all(lag < 1.0 for (lag,) in lags), lags
