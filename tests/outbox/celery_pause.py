"""A Celery transport that can stop between send and settle, to be SIGKILLed there.

With CELERY_TEST_PAUSE_FILE set, the first batch that reaches the broker writes its message ids
to that file and then sleeps instead of returning, so the relay never records the delivery.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.celery import CeleryTransport


class PausingCeleryTransport(CeleryTransport):
    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        results = super().send_many(messages)
        path = os.environ.get("CELERY_TEST_PAUSE_FILE")
        sent = [str(m.id) for m, error in zip(messages, results, strict=True) if error is None]
        if path and sent and not Path(path).exists():
            Path(path).write_text(" ".join(sent))
            time.sleep(600)  # until SIGKILL
        return results
