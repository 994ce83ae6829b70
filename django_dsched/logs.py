"""The package's loggers: arguments are escaped, so user text cannot forge log lines.

Log messages are the package's own constants; what varies comes in as arguments (names,
topics, reasons, error messages from endpoints), and those have their control characters
escaped (:mod:`django_dsched.text`) before any handler formats the record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django_dsched.text import escape_control_characters


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
