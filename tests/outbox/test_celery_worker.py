"""End to end: a schedule fires, the relay sends Celery tasks, a real Celery worker runs them.

Real processes on the real brokers: ``run_scheduler``, ``run_relay`` and ``celery worker``
(pool=solo) on RabbitMQ and on Redis. The first relay is SIGKILLed after the broker confirmed a
task and before the relay recorded the delivery, so a second relay sends that task again with
the same task id; the worker's ExactlyOnceTask runs each task id, so each slot, once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from django_dsched import api
from django_dsched.contrib.celery.models import TaskRun
from django_dsched.enums import DeliveryStatus, RunStatus
from django_dsched.models import Event, OutboxMessage
from django_dsched.outbox.phases import run_status
from tests.brokers import stop
from tests.helpers import wait_for
from tests.integration.conftest import ROOT, Instance, database_url
from tests.integration.stopping import stop_together

pytestmark = pytest.mark.integration

SETTINGS = "--settings=tests.outbox.celery_settings"


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request) -> str:
    name = "rabbitmq_url" if request.param == "rabbitmq" else "redis_url"
    return request.getfixturevalue(name)


class Worker:
    """``celery worker --pool=solo`` on one queue, as a subprocess of its own session."""

    def __init__(self, queue: str, log_path: Path) -> None:
        self.log_path = log_path
        env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONPATH": str(ROOT)}
        env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.outbox.celery_worker_app", "worker",
             "--pool=solo", "--concurrency=1", "-Q", queue, "-l", "INFO",
             "-n", f"{queue}@%h", "--without-heartbeat", "--without-mingle",
             "--without-gossip"],
            cwd=ROOT,
            env=env,
            stdout=log_path.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        wait_for(
            lambda: self.process.poll() is not None or " ready." in self.log(),
            timeout=90,
            what="the celery worker to be ready",
        )
        assert self.process.poll() is None, self.log()


def runs(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split(" ", 2)) for line in path.read_text().splitlines()]  # type: ignore[misc]


def test_each_slot_runs_once_when_the_relay_dies_between_send_and_settle(
    broker, tmp_path, transactional_db, monkeypatch
):
    queue = f"dsched-{uuid.uuid4().hex[:8]}"
    run_log = tmp_path / "runs.log"
    run_log.touch()
    pause_file = tmp_path / "paused"
    monkeypatch.setenv("CELERY_TEST_BROKER_URL", broker)
    monkeypatch.setenv("CELERY_TEST_RUN_LOG", str(run_log))
    api.create_interval(
        "tick",
        every=1,
        unit="SECONDS",
        topic="celery",
        event_type="tests.record",
        data={"task": "tests.record", "args": ["tick"], "options": {"queue": queue}},
    )
    # The worker, the scheduler and the first relay start together: a task sent before the
    # worker consumes waits in its queue (the send declares it).
    worker = Worker(queue, tmp_path / "worker.log")
    processes: list[Instance] = []
    try:
        scheduler = Instance("scheduler", tmp_path, [SETTINGS])
        processes.append(scheduler)
        victim = Instance(
            "victim",
            tmp_path,
            [SETTINGS],
            command="run_relay",
            env={"CELERY_TEST_PAUSE_FILE": str(pause_file)},
        )
        processes.append(victim)
        worker.wait_ready()

        wait_for(pause_file.exists, timeout=60, what="the first relay to send and pause")
        paused = pause_file.read_text().split()
        wait_for(
            lambda: set(paused) <= {run[0] for run in runs(run_log)},
            timeout=30,
            what="the worker to run what the first relay sent",
        )
        victim.signal(signal.SIGKILL)
        victim.process.wait(10)
        processes.append(Instance("rescuer", tmp_path, [SETTINGS], command="run_relay"))

        # The rescuer delivers while slots go on firing: five slots run on the worker.
        wait_for(lambda: len(runs(run_log)) >= 5, timeout=60, what="five slots run")
        scheduler.stop()  # no more slots; let the rescuer deliver what fired
        wait_for(
            lambda: not OutboxMessage.objects.exclude(status=DeliveryStatus.DELIVERED).exists(),
            timeout=60,
            what="every message delivered",
        )
        skipped = [f"id={task_id}: it already ran" for task_id in paused]
        wait_for(
            lambda: all(line in worker.log() for line in skipped),
            timeout=30,
            what="the worker to receive the re-sent task and skip it",
        )
        sent = {str(i) for i in OutboxMessage.objects.values_list("id", flat=True)}
        wait_for(lambda: {r[0] for r in runs(run_log)} >= sent, timeout=30, what="all runs")
        # The worker reported every run back, the re-sent ones too: the rescuer's claim
        # started a new attempt, and the skip reports that the earlier run completed.
        wait_for(
            lambda: {run_status(m) for m in OutboxMessage.objects.all()} == {RunStatus.SUCCEEDED},
            timeout=30,
            what="every run reported succeeded",
        )
    except AssertionError:
        logs = "\n".join(f"--- {p.name}\n{p.log()}" for p in processes)
        raise AssertionError(f"{logs}\n--- worker\n{worker.log()}") from None
    finally:
        worker.process.send_signal(signal.SIGTERM)  # its warm shutdown overlaps the relays'
        stop_together(processes)
        stop(worker.process)

    assert len(sent) >= 5, sent
    counts = Counter(run[0] for run in runs(run_log))
    assert set(counts) == sent and set(counts.values()) == {1}, counts  # once per task id
    # ... which is once per slot: one event per slot, its id the task id.
    slots = dict(Event.objects.filter(scheduled_ts__isnull=False).values_list("id", "scheduled_ts"))
    assert {str(i) for i in slots} == sent and len(set(slots.values())) == len(slots)
    assert TaskRun.objects.filter(task_id__in=sent).count() == len(sent)
    # The headers carry the slot to the task.
    assert {run[2] for run in runs(run_log)} == {
        OutboxMessage.objects.get(id=i).delivered_payload["scheduledtime"] for i in sent
    }
