"""The Celery app of the worker subprocesses in test_celery_worker.py.

``python -m celery -A tests.outbox.celery_worker_app worker ...`` with the environment:
CELERY_TEST_BROKER_URL (the test's broker), DATABASE_URL (the test database) and
CELERY_TEST_RUN_LOG (a file each run of ``tests.record`` appends "task_id label slot" to).

The worker's event loop wakes every tenth of a second (:class:`PromptShutdown`), so that it
stops within that of a SIGTERM.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from celery import Celery, bootsteps  # noqa: E402
from celery.worker import WorkController  # noqa: E402
from kombu.asynchronous.timer import Entry  # noqa: E402

from django_dsched.contrib.celery import ExactlyOnceTask  # noqa: E402

app = Celery("dsched-tests", broker=os.environ["CELERY_TEST_BROKER_URL"])
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


class PromptShutdown(bootsteps.StartStopStep):
    """A timer that does nothing, every 0.1 s: the event loop wakes for it. A SIGTERM only
    sets a flag that the loop reads when it wakes, and it sleeps until its next timer or
    message, up to 10 s: on RabbitMQ (whose heartbeat timer is a minute apart) a test waited
    up to 10 s for the worker to stop (on Redis, up to a second)."""

    requires = {"celery.worker.components:Timer"}
    entry: Entry | None = None

    def start(self, worker: WorkController) -> None:
        self.entry = worker.timer.call_repeatedly(0.1, lambda: None)

    def stop(self, worker: WorkController) -> None:
        if self.entry is not None:
            self.entry.cancel()
            self.entry = None


app.steps["worker"].add(PromptShutdown)


@app.task(base=ExactlyOnceTask, bind=True, name="tests.record")
def record(self, label: str) -> None:
    with open(os.environ["CELERY_TEST_RUN_LOG"], "a") as log:
        log.write(f"{self.request.id} {label} {getattr(self.request, 'dsched_slot', None)}\n")
