"""Optimistic concurrency: a schedule's ``aggregate_version`` is its strong ETag.

Every fire and every change bumps the version, so ``If-Match: "<version>"`` on a write
means "only if nothing happened to it since I read it". Writes of the schedule itself (PUT,
PATCH, DELETE) need one (428 without); the actions accept one. A stale one is a 412 whose
body carries the schedule as it is now. ``If-Match: *`` matches any version (RFC 9110).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rest_framework.request import Request

from django_dsched.models import Schedule
from django_dsched.rest.errors import PreconditionFailed, PreconditionRequired

_STRONG_TAG = re.compile(r'"([0-9]{1,18})"', re.ASCII)
ANY = -1  # If-Match: *


def etag(schedule: Schedule) -> str:
    return f'"{schedule.aggregate_version}"'


def requested_versions(request: Request) -> set[int] | None:
    """The versions in If-Match (``{ANY}`` for ``*``), or None without the header."""
    header = request.headers.get("If-Match")
    if header is None:
        return None
    versions: set[int] = set()
    for tag in header.split(","):
        tag = tag.strip()
        if tag == "*":
            versions.add(ANY)
            continue
        match = _STRONG_TAG.fullmatch(tag)  # weak tags (W/"3") never match a strong ETag
        if match:
            versions.add(int(match.group(1)))
    return versions


def expected_version(
    request: Request,
    schedule: Schedule,
    *,
    required: bool,
    current: Callable[[Schedule], Mapping[str, Any]],
) -> int | None:
    """The version the write may apply to (None: any), or 428 / 412.

    ``current(schedule)`` is the representation a 412 carries.
    """
    versions = requested_versions(request)
    if versions is None:
        if required:
            raise PreconditionRequired()
        return None
    if ANY in versions:
        return None
    if schedule.aggregate_version in versions:
        return schedule.aggregate_version
    raise PreconditionFailed(current=current(schedule), etag=etag(schedule))
