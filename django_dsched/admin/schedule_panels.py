"""What the schedule's page shows under the form: next fires and recent history.

Each list is one bounded query; history pages by version (keyset), so a schedule with a
million events costs the same to show as one with ten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, QueryDict

from django_dsched.admin.display import moment, run_badge, run_duration
from django_dsched.changes.describe import zone_of
from django_dsched.models import Event, OutboxMessage, Schedule

PREVIEW_COUNT = 10
PAGE_SIZE = 10


@dataclass(frozen=True)
class Page:
    """One page of a schedule's history, newest first, and the links around it."""

    rows: list[dict[str, Any]]  # {"obj": the row, and its times as HTML}
    newer_url: str | None
    older_url: str | None


def preview(schedule: Schedule, now: datetime) -> list[datetime]:
    """The next fire times, by :meth:`Schedule.preview` (the scheduler's own code).

    A paused schedule's preview starts where it resumes: the end of its pause, or now.
    """
    return schedule.preview(PREVIEW_COUNT, now)


def _version(request: HttpRequest, param: str) -> int | None:
    try:
        value = int(request.GET.get(param, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _url(request: HttpRequest, param: str, value: int | None) -> str:
    query: QueryDict = request.GET.copy()
    query.pop(param, None)
    if value is not None:
        query[param] = str(value)
    encoded = query.urlencode()
    return f"{request.path}?{encoded}" if encoded else request.path


def _page(
    request: HttpRequest, queryset: Any, param: str, shown: Callable[[Any], dict[str, Any]]
) -> Page:
    before = _version(request, param)
    if before is not None:
        queryset = queryset.filter(aggregate_version__lt=before)
    rows = list(queryset.order_by("-aggregate_version")[: PAGE_SIZE + 1])
    older = rows[PAGE_SIZE - 1].aggregate_version if len(rows) > PAGE_SIZE else None
    return Page(
        rows=[{"obj": row, **shown(row)} for row in rows[:PAGE_SIZE]],
        newer_url=_url(request, param, None) if before is not None else None,
        older_url=_url(request, param, older) if older is not None else None,
    )


def events(request: HttpRequest, schedule: Schedule, now: datetime) -> Page:
    """Fires and changes of the schedule (``?events_before=<version>`` pages back)."""
    return _page(
        request,
        Event.objects.filter(aggregate_id=schedule.pk).only(
            "id",
            "event_type",
            "aggregate_version",
            "scheduled_ts",
            "event_ts",
            "metadata",
            "leader_epoch",
        ),
        "events_before",
        lambda event: {
            "slot": moment(event.scheduled_ts, None, zone=zone_of(schedule))
            if event.scheduled_ts
            else "-",
            "at": moment(event.event_ts, now),
        },
    )


def deliveries(request: HttpRequest, schedule: Schedule, now: datetime) -> Page:
    """The outbox messages of its fires (``?deliveries_before=<version>`` pages back)."""
    return _page(
        request,
        OutboxMessage.objects.filter(aggregate_id=schedule.pk),
        "deliveries_before",
        lambda message: {
            "at": moment(message.event_ts, now),
            "delivered": moment(message.delivered_ts, now) if message.delivered_ts else "-",
            "run": run_badge(message),
            "run_time": run_duration(message),
        },
    )
