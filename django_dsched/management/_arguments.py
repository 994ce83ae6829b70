"""Argument types shared by the management commands (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import ValidationError

from django_dsched.models.validators import identifier_validator
from django_dsched.runtime.text import has_control_characters

N = TypeVar("N", int, float)


def _number(value: str, convert: Callable[[str], N], what: str) -> N:
    try:
        return convert(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None


def positive_int(value: str) -> int:
    number = _number(value, int, "a whole number")
    if not 1 <= number <= 10_000:
        raise argparse.ArgumentTypeError("must be from 1 to 10000")
    return number


def positive_float(value: str) -> float:
    number = _number(value, float, "a number")
    if not 0 < number <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds")
    return number


def positive_days(value: str) -> float:
    days = _number(value, float, "a number")
    if not 0 < days <= 365_000:
        raise argparse.ArgumentTypeError("must be more than 0 days")
    return days


def instance_id(value: str) -> str:
    if not value.strip() or len(value) > 255:
        raise argparse.ArgumentTypeError("must be 1 to 255 characters")
    if has_control_characters(value):
        raise argparse.ArgumentTypeError("must be printable (no line breaks or escapes)")
    return value


def topic(value: str) -> str:
    try:
        identifier_validator(value)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid topic") from None
    return value


def port(value: str) -> int:
    """A TCP port, or 0 for off."""
    number = _number(value, int, "a port number")
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 (off) to 65535")
    return number


def host_id(value: str) -> str:
    """A host (tenant) id: a UUID."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a host id (a UUID, such as {uuid.UUID(int=0)})"
        ) from None
