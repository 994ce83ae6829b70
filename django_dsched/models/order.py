"""The order people read schedules in: the admin's schedule list, ``dsched list`` and
``api.schedules``.

Schedules that will fire first, soonest first: the active ones (by next run, the higher
priority first at the same time: the order they fire in), then the paused ones (by the run
they will resume at); then those that ended (completed, cancelled, set aside), most recently
fired first: a completed one-shot's old next run does not sort it to the top.

:func:`next_fire_order` is that order as one ``ORDER BY`` (a sort of every row it reads).
:data:`NEXT_FIRE_PARTS` is the same order as three parts read one after another, each a
range of an index where one serves it (:func:`read_in_parts`): a page of the admin's list
reads the rows it shows, not the whole table.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Case, F, OrderBy, Q, QuerySet, Value, When

from django_dsched.enums import PLANNED, ScheduleState

# The active part in the order of dsched_schedule_due_idx (next_run_ts, priority DESC): a
# range of that index (with LIMIT, no sort). Not broken further: a tie-breaker the index
# does not hold would sort every schedule of a tie (10,000 hourly crons due at :00), so
# schedules due at the same time with the same priority come in the index's order. The
# paused part is a sort of the paused rows only (dsched_schedule_paused_idx), the ended
# part of the ended rows (no index serves their order; read only by pages past the
# planned ones).
ACTIVE_ORDER = ("next_run_ts", "-priority")
PAUSED_ORDER = ("next_run_ts", "-priority", "-schedule_id")
ENDED_ORDER = (F("last_fired_ts").desc(nulls_last=True), F("schedule_id").desc())
NEXT_FIRE_PARTS: tuple[tuple[Q, tuple[Any, ...]], ...] = (
    (Q(active=True), ACTIVE_ORDER),
    (Q(state=ScheduleState.PAUSED), PAUSED_ORDER),
    (~Q(state__in=PLANNED), ENDED_ORDER),
)


def next_fire_order() -> list[OrderBy]:
    """:data:`NEXT_FIRE_PARTS` as one ordering (total: the newest id breaks ties, and the
    admin adds nothing to it)."""
    planned = Q(state__in=PLANNED)
    return [
        Case(
            When(active=True, then=Value(0)),
            When(state=ScheduleState.PAUSED, then=Value(1)),
            default=Value(2),
        ).asc(),
        Case(When(planned, then=F("next_run_ts"))).asc(),
        Case(When(planned, then=F("priority"))).desc(),
        Case(When(~planned, then=F("last_fired_ts"))).desc(nulls_last=True),
        F("schedule_id").desc(),
    ]


def in_next_fire_order(queryset: QuerySet[Any]) -> bool:
    """Whether ``queryset`` is ordered by :func:`next_fire_order` (a total order: what
    follows it, as the admin's repeat of it, changes nothing)."""
    order = next_fire_order()
    return tuple(queryset.query.order_by[: len(order)]) == tuple(order)


def read_in_parts(queryset: QuerySet[Any], start: int, size: int) -> list[Any]:
    """The ids of ``queryset``'s rows ``start`` to ``start + size`` in next-fire order, read
    part by part (:data:`NEXT_FIRE_PARTS`): a part is read only when the page reaches it,
    and counted only when the page lies wholly past it. The pages of :func:`next_fire_order`
    but for the order among active schedules tied on next run and priority."""
    ids: list[Any] = []
    skip = start
    for condition, ordering in NEXT_FIRE_PARTS:
        wanted = size - len(ids)
        if wanted <= 0:
            break
        part = queryset.filter(condition).order_by(*ordering).values_list("pk", flat=True)
        found = list(part[skip : skip + wanted])
        if found:
            ids += found
            skip = 0  # the part ended within the page, or the page is full
        elif skip:
            skip -= part.count()  # the page lies past this part: at most ``skip`` rows
    return ids


__all__ = ["NEXT_FIRE_PARTS", "in_next_fire_order", "next_fire_order", "read_in_parts"]
