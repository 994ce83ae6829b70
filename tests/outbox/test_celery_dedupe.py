"""ExactlyOnceTask in process: a task id runs once; a failed run leaves no record."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from django.contrib.auth.models import Group

from django_dsched.contrib.celery import ExactlyOnceTask, purge_task_runs
from django_dsched.contrib.celery.models import TaskRun
from tests.helpers import sql

pytestmark = pytest.mark.django_db(transaction=True)

app = Celery("dedupe-tests", set_as_current=False)
CALLS: list[str] = []


@app.task(base=ExactlyOnceTask, name="tests.dedupe.work")
def work(label: str, fail: bool = False) -> str:
    Group.objects.create(name=label)  # a database effect, in the run's transaction
    CALLS.append(label)
    if fail:
        raise RuntimeError("boom")
    return label


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()


def test_a_task_id_runs_once():
    task_id = str(uuid.uuid4())
    assert work.apply(args=["first"], task_id=task_id).get() == "first"
    assert work.apply(args=["again"], task_id=task_id).get() is None  # skipped
    assert CALLS == ["first"]
    run = TaskRun.objects.get()
    assert (run.task_id, run.task_name) == (task_id, "tests.dedupe.work")


def test_a_failed_run_is_rolled_back_with_its_record_and_runs_again():
    task_id = str(uuid.uuid4())
    assert work.apply(args=["flaky", True], task_id=task_id).failed()
    assert not TaskRun.objects.exists() and not Group.objects.exists()  # nothing committed
    assert work.apply(args=["flaky"], task_id=task_id).get() == "flaky"
    assert CALLS == ["flaky", "flaky"] and Group.objects.get().name == "flaky"
    assert TaskRun.objects.filter(task_id=task_id).exists()


def test_a_direct_call_just_runs():
    assert work("direct") == "direct" and work("direct-2") == "direct-2"
    assert not TaskRun.objects.exists()


def test_old_records_are_purged():
    work.apply(args=["old"], task_id="old-id")
    work.apply(args=["new"], task_id="new-id")
    sql("UPDATE dsched_celery_task_run_t SET started_ts = now() - interval '50 days' "
        "WHERE task_id = 'old-id'")  # fmt: skip
    assert purge_task_runs(45) == 1
    assert list(TaskRun.objects.values_list("task_id", flat=True)) == ["new-id"]
