"""Argument types shared by the management commands (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse

from django.core.exceptions import ValidationError

from django_dsched.text import has_control_characters
from django_dsched.validation import identifier_validator


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= 10_000:
        raise argparse.ArgumentTypeError("must be from 1 to 10000")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 < number <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds")
    return number


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
