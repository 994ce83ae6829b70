"""Schedules declared in code that the sync would refuse (dsched.W006)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Tags, Warning, register

from django_dsched import declared
from django_dsched.exceptions import ConfigurationError, ValidationError


@register(Tags.compatibility)
def check_declared_schedules(**kwargs: Any) -> list[Warning]:
    """Each schedule declared in code (``DSCHED_SCHEDULES``, ``@periodic``) is one the sync
    would accept (dsched.W006). A warning: a bad declaration stops the sync (``migrate``,
    ``dsched sync``) with its reason, never the scheduler or the relay, which fire what is
    in the database."""

    def warning(what: str) -> Warning:
        hint = "Fix it in DSCHED_SCHEDULES or in its @periodic declaration."
        return Warning(what, hint=hint, id="dsched.W006")

    try:
        specs = declared.declarations()
    except ValidationError as exc:  # DSCHED_SCHEDULES is not a dict
        return [warning(exc.messages[0])]
    except ConfigurationError as exc:  # @periodic refused a declaration while imported
        return [warning(f"declared schedules: {exc}")]
    found = []
    for name, spec in sorted(specs.items(), key=lambda item: str(item[0])):
        try:
            why = declared.problem(name, spec)
        except Exception as exc:  # a check never raises: what the sync would meet too
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            found.append(warning(f"declared schedule {name!r}: {why}"))
    return found
