"""This host can read IANA time zones (dsched.E014)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.checks import Error, Tags, register

# A zone every tzdata release has had: if it cannot be read, this host has no tzdata.
PROBE_ZONE = "America/New_York"


@register(Tags.compatibility)
def check_time_zones(**kwargs: Any) -> list[Error]:
    """dsched.E014: this host can read IANA time zones.

    A scheduler that cannot read a schedule's zone sets the schedule aside (the row is
    taken for bad data); on a host with no tzdata at all that would be every schedule in a
    zone, so such a host is refused at start instead.
    """
    try:
        ZoneInfo(PROBE_ZONE)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return [
            Error(
                f"This host cannot read the IANA time zone {PROBE_ZONE!r}: it has no tzdata.",
                hint="Install the system's tzdata package, or the tzdata package from PyPI.",
                id="dsched.E014",
            )
        ]
    return []
