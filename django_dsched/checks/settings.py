"""The scheduler's settings (dsched.E003 to E006, with the bucket settings' E020 to E022 and
the overlap policies' E040) and ``DSCHED_*`` names the package does not read
(dsched.W005)."""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from django_dsched.checks.buckets import bucket_setting_errors
from django_dsched.conf import PREFIX, AppSettings, app_settings


@register(Tags.compatibility)
def check_settings(**kwargs: Any) -> list[Error]:
    errors = []
    if not settings.USE_TZ:
        errors.append(
            Error(
                "django-dsched needs USE_TZ = True: schedule times are instants.",
                id="dsched.E003",
            )
        )
    lease, heartbeat = app_settings.LEASE_SECONDS, app_settings.HEARTBEAT_SECONDS
    if not (isinstance(heartbeat, int | float) and heartbeat > 0 and lease >= 2 * heartbeat):
        errors.append(
            Error(
                f"DSCHED_LEASE_SECONDS ({lease}) must be at least twice "
                f"DSCHED_HEARTBEAT_SECONDS ({heartbeat}), and both positive.",
                hint="A leader renews its lease every heartbeat; two missed beats end it.",
                id="dsched.E004",
            )
        )
    for name in ("POLL_INTERVAL", "STANDBY_INTERVAL"):
        value = getattr(app_settings, name)
        if not (is_number(value) and 0 < value < float("inf")):
            errors.append(Error(f"DSCHED_{name} must be a positive number.", id="dsched.E005"))
    batch = app_settings.BATCH_SIZE
    if not (isinstance(batch, int) and 1 <= batch <= 10_000):
        errors.append(
            Error("DSCHED_BATCH_SIZE must be a whole number from 1 to 10000.", id="dsched.E006")
        )
    errors.extend(bucket_setting_errors())
    errors.extend(overlap_setting_errors())
    return errors


# The longest a run handed to workers may count as going (a year, as the relay's timings).
MAX_WORKER_TIMEOUT = 365 * 86_400


def overlap_setting_errors() -> list[Error]:
    """The overlap policies' settings (dsched.E040, docs/overlap.md)."""
    limit, timeout = app_settings.OVERLAP_BUFFER_LIMIT, app_settings.OVERLAP_WORKER_TIMEOUT
    errors = []
    if not (isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= 10_000):
        errors.append(
            Error(
                "DSCHED_OVERLAP_BUFFER_LIMIT must be a whole number from 1 to 10000.",
                hint="The most slots a BUFFER_ALL schedule keeps waiting (Temporal's: 1000).",
                id="dsched.E040",
            )
        )
    if not (is_number(timeout) and 0 < timeout <= MAX_WORKER_TIMEOUT):
        errors.append(
            Error(
                "DSCHED_OVERLAP_WORKER_TIMEOUT must be a positive number of seconds, at most "
                "a year.",
                hint="How long a run handed to workers counts as going without an end report.",
                id="dsched.E040",
            )
        )
    return errors


@register(Tags.compatibility)
def check_unknown_settings(**kwargs: Any) -> list[Warning]:
    """A ``DSCHED_*`` setting the package does not read is most likely a misspelt one."""
    known = {setting.setting_name for setting in AppSettings.all()}
    shortened = {setting.name for setting in AppSettings.all()}  # the prefix would match
    warnings = []
    for name in sorted(dir(settings)):
        if not name.startswith(PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name.removeprefix(PREFIX), sorted(shortened), n=1)
        warnings.append(
            Warning(
                f"{name} is not a django-dsched setting: it is ignored.",
                hint=f"Did you mean {PREFIX}{close[0]}?"
                if close
                else "The settings are listed in the reference (docs/reference.md).",
                id="dsched.W005",
            )
        )
    return warnings


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
