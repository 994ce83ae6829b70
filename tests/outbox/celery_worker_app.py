"""The Celery app of the worker subprocesses in test_celery_worker.py.

``python -m celery -A tests.outbox.celery_worker_app worker ...`` with the environment:
CELERY_TEST_BROKER_URL (the test's broker), DATABASE_URL (the test database) and
CELERY_TEST_RUN_LOG (a file each run of ``tests.record`` appends "task_id label slot" to).
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from celery import Celery  # noqa: E402

from django_dsched.contrib.celery import ExactlyOnceTask  # noqa: E402

app = Celery("dsched-tests", broker=os.environ["CELERY_TEST_BROKER_URL"])
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(base=ExactlyOnceTask, bind=True, name="tests.record")
def record(self, label: str) -> None:
    with open(os.environ["CELERY_TEST_RUN_LOG"], "a") as log:
        log.write(f"{self.request.id} {label} {getattr(self.request, 'dsched_slot', None)}\n")
