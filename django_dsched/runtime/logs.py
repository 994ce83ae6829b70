"""The package's loggers: arguments are escaped, so user text cannot forge log lines; and an
opt-in JSON formatter (:class:`JsonFormatter`).

Log messages are the package's own constants; what varies comes in as arguments (names,
topics, reasons, error messages from endpoints), and those have their control characters
escaped (:mod:`django_dsched.runtime.text`) before any handler formats the record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django_dsched.runtime.text import escape_control_characters


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_control_characters(value)
    if isinstance(value, BaseException):
        return escape_control_characters(str(value))
    return value


class EscapeControlCharacters(logging.Filter):
    """Escapes control characters in a record's string (and exception) arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_escaped(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _escaped(arg) for key, arg in record.args.items()}
        return True


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`EscapeControlCharacters` on it."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, EscapeControlCharacters) for f in logger.filters):
        logger.addFilter(EscapeControlCharacters())
    return logger


# The context fields the package's log calls pass with ``extra=`` (about a fire or a
# delivery); JsonFormatter writes each one a record carries.
CONTEXT_FIELDS = (
    "instance",
    "epoch",
    "schedule",
    "schedules",
    "slot",
    "message_id",
    "topic",
    "attempt",
)


# Unicode's line and paragraph separators, as JSON escapes (JSON allows them raw).
LINE_SEPARATORS = {0x2028: "\\u2028", 0x2029: "\\u2029"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the context fields a record carries (:data:`CONTEXT_FIELDS`: instance,
    epoch, schedule, slot, message id, ...) and ``exception`` when there is one.

    Opt in from ``LOGGING`` (docs/observability.md)::

        "formatters": {"json": {"()": "django_dsched.runtime.logs.JsonFormatter"}}

    ``json.dumps`` escapes every control character, and the two Unicode line separators
    (U+2028, U+2029, which ``str.splitlines()`` and some log shippers break lines on) are
    escaped too, so a value cannot forge a line.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        text = json.dumps(entry, default=str, ensure_ascii=False)
        return text.translate(LINE_SEPARATORS)
